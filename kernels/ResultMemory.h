// Device kernels run as CPU kernels on host views of device memory; a kernel that makes a
// new tensor (relu, softmax, sum) allocates it through the CPU allocator, and copying the
// result into device memory afterwards cost as much as the kernel itself for elementwise
// operators. While such a kernel's CPU body runs under a DeviceResultScope, each large CPU
// allocation on that thread is lent the cached device block that the device allocator would
// hand out for that size now (host-addressable, as all device memory here is). The result's
// device allocation then usually finds its data already in place, and nothing is copied.
// The device allocator's requests and choices are the same as without lending (a lent block
// stays in its cache; other threads skip it meanwhile), so simulated time, memory statistics
// and timing mode's equivalence with full mode are unchanged; a wrong guess costs the copy.
#pragma once

#include <c10/core/Device.h>

#include <cstddef>

namespace cardsim::kernels {

// Allocations of this many bytes or more are lent device blocks; below, a copy is cheap.
constexpr size_t kDeviceResultMinBytes = 64 * 1024;

// The device allocator's side (DeviceAllocator.cpp registers it).
struct CachedBlockLender {
  // The cached block an allocation of `bytes` on the current device and stream would get
  // now, lent to the calling thread; nullptr if the allocation would take new memory.
  void* (*lend)(size_t bytes) = nullptr;
  void (*give_back)(void* block) = nullptr;   // the lending ends (the CPU side freed it)
};
void setCachedBlockLender(CachedBlockLender lender);

class DeviceResultScope {
 public:
  explicit DeviceResultScope(bool active);
  ~DeviceResultScope();
  DeviceResultScope(const DeviceResultScope&) = delete;
  DeviceResultScope& operator=(const DeviceResultScope&) = delete;

 private:
  bool previous_;
};

}  // namespace cardsim::kernels
