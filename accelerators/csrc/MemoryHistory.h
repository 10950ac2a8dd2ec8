// The caching allocator's history, for memory snapshots (torch.<dev>.memory.
// _record_memory_history, _snapshot): the stack that allocated each live block and, when the
// trace is on, a bounded log of what the allocator did (allocations, frees, device segments,
// out-of-memory), per device, with simulated host times. Off by default and free when off.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace cardsim::accel {

struct AllocatorTraceEntry {
  const char* action;   // "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom"
  uint64_t addr = 0;
  uint64_t size = 0;
  int64_t stream = 0;
  int64_t time_us = 0;  // simulated host time of the call
  uint64_t device_free = 0;   // "oom": the device's free bytes
  std::shared_ptr<c10::GatheredContext> context;   // the calling stack, if stacks are recorded
};

class MemoryHistory {
 public:
  using Gather = std::shared_ptr<c10::GatheredContext> (*)();
  // `contexts`: keep the allocating stack of each block; `trace`: also log every action, at
  // most `max_entries` per device (the oldest go first); `clear`: forget the log so far.
  void configure(bool contexts, bool trace, size_t max_entries, bool clear, Gather gather);
  bool recordingContexts() const { return contexts_.load(std::memory_order_relaxed); }
  // The calling stack, or null when not recorded.
  std::shared_ptr<c10::GatheredContext> gather() const;
  void record(const char* action, c10::DeviceIndex device, const void* addr, uint64_t size, int64_t stream,
              std::shared_ptr<c10::GatheredContext> context, uint64_t device_free = 0);
  std::vector<AllocatorTraceEntry> trace(c10::DeviceIndex device) const;
  size_t devicesTraced() const;

 private:
  std::atomic<bool> contexts_{false};
  std::atomic<bool> trace_{false};
  mutable std::mutex mutex_;
  size_t max_entries_ = 0;
  Gather gather_ = nullptr;
  std::vector<std::deque<AllocatorTraceEntry>> log_;   // by device
};

MemoryHistory& memoryHistory();

}  // namespace cardsim::accel
