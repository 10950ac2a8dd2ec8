#include "MemoryHistory.h"

#include <cardsim/shim.h>

namespace cardsim::accel {

void MemoryHistory::configure(bool contexts, bool trace, size_t max_entries, bool clear, Gather gather) {
  std::lock_guard<std::mutex> lock(mutex_);
  max_entries_ = max_entries;
  gather_ = gather;
  if (clear) log_.clear();   // stopping keeps the log: a snapshot taken after still shows it
  for (auto& d : log_)
    while (d.size() > max_entries_) d.pop_front();
  trace_.store(trace, std::memory_order_relaxed);
  contexts_.store(contexts || trace, std::memory_order_relaxed);
}

std::shared_ptr<c10::GatheredContext> MemoryHistory::gather() const {
  if (!recordingContexts()) return nullptr;
  Gather g;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    g = gather_;
  }
  return g ? g() : nullptr;
}

void MemoryHistory::record(const char* action, c10::DeviceIndex device, const void* addr, uint64_t size,
                           int64_t stream, std::shared_ptr<c10::GatheredContext> context, uint64_t device_free) {
  if (!trace_.load(std::memory_order_relaxed) || device < 0) return;
  uint64_t ps = 0;
  (void)shim::hostTimePs(&ps);
  std::lock_guard<std::mutex> lock(mutex_);
  if (max_entries_ == 0) return;
  if (log_.size() <= static_cast<size_t>(device)) log_.resize(static_cast<size_t>(device) + 1);
  auto& d = log_[static_cast<size_t>(device)];
  if (d.size() == max_entries_) d.pop_front();
  d.push_back(AllocatorTraceEntry{action, reinterpret_cast<uint64_t>(addr), size, stream,
                                  static_cast<int64_t>(ps / 1000000), device_free, std::move(context)});
}

std::vector<AllocatorTraceEntry> MemoryHistory::trace(c10::DeviceIndex device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (device < 0 || static_cast<size_t>(device) >= log_.size()) return {};
  const auto& d = log_[static_cast<size_t>(device)];
  return {d.begin(), d.end()};
}

size_t MemoryHistory::devicesTraced() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return log_.size();
}

MemoryHistory& memoryHistory() {
  static MemoryHistory h;
  return h;
}

}  // namespace cardsim::accel
