// The device caching allocator (as torch.cuda's, over the shim's malloc/free) and the
// pinned host allocator.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

#include <string>

namespace cardsim::accel {

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
  std::string summary(c10::DeviceIndex device);
};

CachingAllocator& deviceAllocator();
c10::Allocator& pinnedAllocator();
void registerHooks();

}  // namespace cardsim::accel
