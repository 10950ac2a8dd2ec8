// The async checker's guard on device memory (shim.h checkGuardDeviceMemory): while on,
// every device allocation is mapped inaccessible to the host, except while a window is
// open — the runtime's own copies, memsets and kernel work, and the framework layer's
// operators (checkHostWindow). Host code that dereferences a device pointer outside them
// (through data_ptr() in an extension, ctypes) faults, as it would on a real card; the
// fault handler names the allocation and then lets the previous handler (Python's
// faulthandler: the Python stack) or the default action stop the process.
//
// Windows are process-wide (page protection is), counted across threads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace cardsim::shim {

class HostAccessGuard {
 public:
  static HostAccessGuard& instance();

  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void setEnabled(bool on);
  void open();
  void close();

  // DeviceMemory's mappings (device memory only).
  void mapped(void* base, std::size_t mapped_bytes, std::size_t size, int device);
  void unmapped(void* base);

  // For the fault handler and tests: the mapping holding `addr` (try-lock: never blocks).
  struct Range {
    uintptr_t base = 0;
    std::size_t mapped = 0, size = 0;
    int device = -1;
  };
  bool tryFind(uintptr_t addr, Range* out);
  bool windowOpen() const { return depth_.load(std::memory_order_relaxed) > 0; }

  // Opens a window for its scope when the guard is on and the call touches device memory
  // (`needed`); nothing otherwise.
  class Window {
   public:
    explicit Window(bool needed = true) : on_(needed && instance().enabled()) {
      if (on_) instance().open();
    }
    ~Window() {
      if (on_) instance().close();
    }
    Window(const Window&) = delete;
    Window& operator=(const Window&) = delete;

   private:
    bool on_;
  };

 private:
  void protectAllLocked(bool accessible);
  std::atomic<bool> enabled_{false};
  std::atomic<int> depth_{0};
  std::mutex mutex_;
  std::map<uintptr_t, Range> ranges_;
};

}  // namespace cardsim::shim
