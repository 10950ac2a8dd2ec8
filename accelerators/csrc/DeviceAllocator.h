// The device caching allocator (as torch.cuda's, over the shim's malloc/free) and the
// pinned host allocator.
#pragma once

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

#include <memory>
#include <string>
#include <vector>

namespace cardsim::accel {

// One device segment as a memory snapshot shows it: blocks are not split, so each segment
// holds one block, in use ("active_allocated"), cached ("inactive") or freed while another
// stream still uses it ("active_pending_free").
struct SegmentSnapshot {
  c10::DeviceIndex device = 0;
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t used = 0;           // of it, what the current allocation counts (its request, rounded)
  uint64_t requested = 0;      // of the block's current (or last) allocation
  int64_t stream = 0;
  const char* state = "inactive";
  std::shared_ptr<c10::GatheredContext> context;   // the allocating stack, while recorded and in use
};

class CachingAllocator final : public c10::DeviceAllocator {
 public:
  at::DataPtr allocate(size_t bytes) override;
  at::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;
  bool initialized() override;
  void emptyCache(c10::MempoolId_t pool = {0, 0}) override;
  void recordStream(const at::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // Per device: bytes in use by tensors, bytes held from the device (in use + cached).
  size_t allocatedBytes(c10::DeviceIndex device);
  // torch.cuda.set_per_process_memory_fraction: the allocator holds at most `fraction` of
  // the device's memory (reserved bytes, cached included); past it an allocation fails as
  // an out-of-memory one does, after the cache is given back.
  void setMemoryFraction(double fraction, c10::DeviceIndex device);
  double memoryFraction(c10::DeviceIndex device);
  std::string summary(c10::DeviceIndex device);
  std::vector<SegmentSnapshot> segments();
};

CachingAllocator& deviceAllocator();
// The pinned host allocator, also PrivateUse1's at::HostAllocator (torch.accelerator's
// empty_host_cache, host memory statistics). It caches nothing: each block goes back to the
// runtime when freed, so emptying its cache has nothing to do.
at::HostAllocator& pinnedAllocator();
void registerHooks();

}  // namespace cardsim::accel
