// Simulated device memory: every allocation is its own anonymous mapping reserved with
// MAP_NORESERVE, so a card larger than the host works as long as the bytes actually
// touched fit. Capacity is enforced per device; pointers resolve to their allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "cardsim/shim.h"

namespace cardsim::shim {

class DeviceMemory {
 public:
  // Sizes are accounted in multiples of this, as runtimes round allocations.
  static constexpr std::size_t kGranularity = 512;

  DeviceMemory(std::vector<uint64_t> capacity_per_device, std::vector<std::string> device_names);

  Status allocate(int device, std::size_t bytes, void** out);
  Status release(void* ptr, int* device_out);
  Status hostAllocate(std::size_t bytes, void** out);
  Status hostRelease(void* ptr);
  // Page-locks existing host memory (it then copies as pinned memory does).
  Status hostRegister(void* ptr, std::size_t bytes);
  Status hostUnregister(void* ptr);

  uint64_t used(int device) const;
  uint64_t capacity(int device) const { return capacity_.at(static_cast<size_t>(device)); }

  struct Found {
    bool device_memory = false;  // false: pinned host memory
    int device = -1;
    uint8_t* base = nullptr;
    std::size_t size = 0;
  };
  // The allocation holding [ptr, ptr + bytes), if any.
  bool find(const void* ptr, Found* out) const;

 private:
  struct Block {
    std::size_t size;        // as requested
    std::size_t mapped;      // bytes mapped (page-rounded)
    int device;              // -1: pinned host memory
    bool registered = false; // host memory the caller owns, registered as pinned
  };
  mutable std::mutex mutex_;
  std::map<uintptr_t, Block> blocks_;
  std::vector<uint64_t> capacity_;
  std::vector<uint64_t> used_;
  std::vector<std::string> names_;
};

}  // namespace cardsim::shim
