#include "DeviceAllocator.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "DeviceRuntime.h"
#include "KernelLaunch.h"
#include "MemoryHistory.h"
#include "ResultMemory.h"

namespace cardsim::accel {

using kernels::throwIfFailed;
namespace stats = c10::CachingDeviceAllocator;
constexpr auto kDev = c10::DeviceType::PrivateUse1;

namespace {

constexpr size_t kRound = 512;                 // allocation granularity, as torch.cuda's
constexpr size_t kSmall = 1 << 20;             // blocks up to 1 MiB count as the small pool
constexpr size_t kMaxDevices = 64;

struct Block {
  void* ptr = nullptr;
  size_t size = 0;          // rounded: what the device gave
  size_t requested = 0;     // what the caller asked for
  size_t used = 0;          // requested, rounded: what counts as allocated
  c10::DeviceIndex device = 0;
  c10::StreamId stream = 0; // the stream it was allocated on; reuse stays on that stream
  std::vector<c10::Stream> uses;   // other streams recorded with record_stream
  std::shared_ptr<c10::GatheredContext> context;   // allocating stack, while history is recorded
};

struct DeviceState {
  std::multimap<size_t, Block*> cached;                         // free, by size
  std::unordered_map<void*, Block*> blocks;                      // every block held
  // Freed while other streams used them, in the order they were freed, with an event on
  // each such stream (recorded at the free).
  std::vector<std::pair<Block*, std::vector<std::pair<c10::Stream, shim::Event>>>> pending;
  stats::DeviceStats stats;
  double fraction = 1;     // set_per_process_memory_fraction
  size_t limit = 0;        // its bytes (reserved may not pass them); 0: none
};

std::recursive_mutex g_mutex;
DeviceState g_devices[kMaxDevices];
// Cached blocks lent to a thread's CPU kernel (ResultMemory.h): other threads skip them.
std::unordered_map<void*, std::thread::id> g_lent;

// Lent to another thread (or, `any_thread`, to any).
bool lent(const Block* b, bool any_thread) {
  if (g_lent.empty()) return false;
  auto it = g_lent.find(b->ptr);
  return it != g_lent.end() && (any_thread || it->second != std::this_thread::get_id());
}

// The cached block allocate() would choose now for `size` (rounded) bytes on `stream`;
// `lending`: a block for another of the kernel's allocations, none already lent.
std::multimap<size_t, Block*>::iterator bestFit(DeviceState& d, size_t size, c10::StreamId stream,
                                                bool lending = false) {
  // Best fit on the same stream, wasting at most an eighth (or 1 MiB) of the block.
  const size_t limit = size + std::max(size / 8, kSmall);
  for (auto it = d.cached.lower_bound(size); it != d.cached.end() && it->first <= limit; ++it)
    if (it->second->stream == stream && !lent(it->second, lending)) return it;
  return d.cached.end();
}

size_t roundUp(size_t n) { return (n + kRound - 1) / kRound * kRound; }

template <typename F>
void forEachStat(stats::DeviceStats& s, F&& f) {
  for (auto* arr : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                    &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes})
    for (auto& st : *arr) f(st);
}

template <typename F>
void forPools(size_t size, F&& f) {
  f(static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE));
  f(static_cast<size_t>(size <= kSmall ? c10::CachingAllocator::StatType::SMALL_POOL
                                       : c10::CachingAllocator::StatType::LARGE_POOL));
}

std::string mib(double bytes) {
  char buf[64];
  if (bytes >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1ull << 30));
  else std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1 << 20));
  return buf;
}

// The allocator's own runtime calls (allocating, freeing, querying its events) are exempt
// from capture-mode checks, as PyTorch's CUDA allocator exempts them: a graph's memory comes
// from here while it captures.
struct RelaxedCaptureMode {
  shim::CaptureMode previous = shim::CaptureMode::Relaxed;
  RelaxedCaptureMode() { (void)shim::threadExchangeCaptureMode(&previous); }
  ~RelaxedCaptureMode() { (void)shim::threadExchangeCaptureMode(&previous); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;
};

// Moves freed blocks whose recorded streams have finished (in simulated time) to the cache.
void collectPending(DeviceState& d, bool wait) {
  RelaxedCaptureMode relaxed;
  auto& p = d.pending;
  // A stream runs in order: once one of its events is not reached, its later ones are not
  // either, and are not asked about (as PyTorch's allocator stops at the first per stream).
  std::vector<c10::Stream> behind;
  std::vector<std::pair<Block*, std::vector<std::pair<c10::Stream, shim::Event>>>> still;
  for (auto& entry : p) {
    bool done = true;
    for (const auto& [stream, e] : entry.second) {
      if (wait) {
        (void)shim::eventSynchronize(e);
      } else if (std::find(behind.begin(), behind.end(), stream) != behind.end()) {
        done = false;
      } else if (shim::eventQuery(e).code() == shim::Code::NotReady) {
        behind.push_back(stream);
        done = false;
      }
    }
    if (!done) {
      still.push_back(std::move(entry));
      continue;
    }
    for (const auto& [stream, e] : entry.second) (void)shim::eventDestroy(e);
    Block* b = entry.first;
    memoryHistory().record("free_completed", b->device, b->ptr, b->used, b->stream, nullptr);
    d.cached.emplace(b->size, b);
  }
  p.swap(still);   // the rest, still in the order they were freed
}

// Returns every cached block of the device to the shim.
void releaseCached(DeviceState& d) {
  RelaxedCaptureMode relaxed;
  std::multimap<size_t, Block*> kept;   // lent to a kernel that writes them now
  for (auto& [size, b] : d.cached) {
    if (lent(b, /*any_thread=*/true)) {
      kept.emplace(size, b);
      continue;
    }
    memoryHistory().record("segment_free", b->device, b->ptr, b->size, b->stream, memoryHistory().gather());
    (void)shim::free(b->ptr);
    forPools(b->size, [&](size_t k) {
      d.stats.reserved_bytes[k].decrease(b->size);
      d.stats.segment[k].decrease(1);
    });
    d.stats.num_device_free++;
    d.blocks.erase(b->ptr);
    delete b;
  }
  d.cached.swap(kept);
}

// Returns a block to its device's cache (or to the pending list while other streams use it).
void releaseBlock(Block* b) {
  // Timing mode: host data the block carried is zeroed, so the next tensor reads as zeros.
  if (kernels::timingMode()) (void)shim::timingScrub(b->ptr, b->size);
  // The async checker keeps the block's last uses, marked freed: a reuse they are not
  // ordered before is a missing record_stream.
  if (shim::checkEnabled()) (void)shim::checkBlockFreed(b->ptr, b->size);
  std::shared_ptr<c10::GatheredContext> freed_at = memoryHistory().gather();
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  {
    DeviceState& d = g_devices[b->device];
    memoryHistory().record("free_requested", b->device, b->ptr, b->used, b->stream, freed_at);
    b->context.reset();
    forPools(b->size, [&](size_t k) {
      d.stats.allocation[k].decrease(1);
      d.stats.active[k].decrease(1);
      d.stats.allocated_bytes[k].decrease(b->used);
      d.stats.active_bytes[k].decrease(b->used);
      d.stats.requested_bytes[k].decrease(b->requested);
    });
    if (b->uses.empty()) {
      memoryHistory().record("free_completed", b->device, b->ptr, b->used, b->stream, std::move(freed_at));
      d.cached.emplace(b->size, b);
      return;
    }
    // Used by other streams: reusable once they have reached this point in simulated time.
    std::vector<std::pair<c10::Stream, shim::Event>> events;
    try {
      for (const c10::Stream& s : b->uses) {
        const c10::DeviceIndex prev = currentDevice();
        setCurrentDevice(s.device_index());
        shim::Event e = nullptr;
        if (shim::eventCreate(&e, shim::kEventDisableTiming).ok()) {
          if (shim::eventRecord(e, shimStream(s)).ok()) events.emplace_back(s, e);
          else (void)shim::eventDestroy(e);
        }
        setCurrentDevice(prev);
      }
    } catch (...) {
    }
    b->uses.clear();
    d.pending.emplace_back(b, std::move(events));
  }
}

// The DataPtr's context is its Block: freeing needs no search.
void deleteBlock(void* ctx) {
  if (ctx) releaseBlock(static_cast<Block*>(ctx));
}

Block* findBlock(const void* ptr) {
  for (auto& d : g_devices)
    if (auto it = d.blocks.find(const_cast<void*>(ptr)); it != d.blocks.end()) return it->second;
  return nullptr;
}

}  // namespace

at::DataPtr CachingAllocator::allocate(size_t bytes) {
  const c10::DeviceIndex device = currentDevice();
  const c10::Device where(kDev, device);
  if (bytes == 0) return at::DataPtr(nullptr, nullptr, &deleteBlock, where);
  const size_t size = roundUp(bytes);
  const c10::StreamId stream = accel::currentStream(device).id();
  std::shared_ptr<c10::GatheredContext> context = memoryHistory().gather();
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  DeviceState& d = g_devices[device];
  collectPending(d, false);
  Block* b = nullptr;
  if (auto it = bestFit(d, size, stream); it != d.cached.end()) {
    b = it->second;
    d.cached.erase(it);
    if (!g_lent.empty()) g_lent.erase(b->ptr);   // this thread's own lent block: its data is the result's
  }
  if (!b) {
    RelaxedCaptureMode relaxed;
    void* ptr = nullptr;
    const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    // Past the process's memory fraction the allocation fails as the device's memory running
    // out would (the same retry, the same error).
    auto deviceMalloc = [&] {
      if (d.limit > 0 && static_cast<size_t>(d.stats.reserved_bytes[agg].current) + size > d.limit)
        return shim::Status(shim::Code::OutOfMemory, "over the process's memory fraction");
      return shim::malloc(&ptr, size);
    };
    shim::Status st = deviceMalloc();
    if (st.code() == shim::Code::OutOfMemory) {
      // Wait for freed blocks, give the whole cache back, try once more.
      d.stats.num_alloc_retries++;
      collectPending(d, true);
      releaseCached(d);
      st = deviceMalloc();
    }
    if (st.code() == shim::Code::OutOfMemory) {
      d.stats.num_ooms++;
      size_t free_b = 0, total_b = 0;
      (void)shim::memGetInfo(&free_b, &total_b);
      memoryHistory().record("oom", device, nullptr, bytes, stream, context, free_b);
      std::string limit;
      if (d.limit > 0)
        limit = "; this process may hold " + mib(static_cast<double>(d.limit)) + " (set_per_process_memory_fraction(" +
                std::to_string(d.fraction) + "))";
      TORCH_CHECK_WITH(OutOfMemoryError, false, personality().device, " out of memory. Tried to allocate ",
                       mib(static_cast<double>(bytes)), " (", personality().device, ":", int(device),
                       "; ", mib(static_cast<double>(total_b)), " total capacity; ",
                       mib(static_cast<double>(d.stats.allocated_bytes[agg].current)),
                       " already allocated; ", mib(static_cast<double>(free_b)), " free; ",
                       mib(static_cast<double>(d.stats.reserved_bytes[agg].current)),
                       " reserved in total by the allocator", limit, ")");
    }
    throwIfFailed(st, "device malloc");
    b = new Block;
    b->ptr = ptr;
    b->size = size;
    b->device = device;
    b->stream = stream;
    d.blocks[ptr] = b;
    d.stats.num_device_alloc++;
    memoryHistory().record("segment_alloc", device, ptr, size, stream, context);
    forPools(size, [&](size_t k) {
      d.stats.reserved_bytes[k].increase(size);
      d.stats.segment[k].increase(1);
    });
  }
  // A reused cached block may be larger than asked for (blocks are not split): allocated
  // bytes count the rounded request, as torch.cuda's do; reserved bytes count the blocks.
  b->requested = bytes;
  b->used = size;
  memoryHistory().record("alloc", device, b->ptr, b->used, stream, context);
  b->context = std::move(context);
  forPools(b->size, [&](size_t k) {
    d.stats.allocation[k].increase(1);
    d.stats.active[k].increase(1);
    d.stats.allocated_bytes[k].increase(b->used);
    d.stats.active_bytes[k].increase(b->used);
    d.stats.requested_bytes[k].increase(bytes);
  });
  return at::DataPtr(b->ptr, b, &deleteBlock, where);
}

// DataPtrs carry their Block as context (so frees need no search), which the raw
// allocation API does not allow: it is not offered.
at::DeleterFnPtr CachingAllocator::raw_deleter() const { return nullptr; }

void CachingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  // A storage clone copies at once; a graph replay could not repeat it.
  TORCH_CHECK(!kernels::isCapturing(kernels::currentStream(currentDevice())),
              "cloning a device storage (a copy-on-write materialization) cannot be captured into a "
              "graph: the stream of device ", static_cast<int>(currentDevice()), " is capturing");
  throwIfFailed(shim::memcpy(dest, src, count, shim::MemcpyKind::DeviceToDevice), "copy_data");
}

bool CachingAllocator::initialized() { return true; }

void CachingAllocator::emptyCache(c10::MempoolId_t) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  for (auto& d : g_devices) {
    collectPending(d, true);
    releaseCached(d);
  }
}

void CachingAllocator::recordStream(const at::DataPtr& ptr, c10::Stream stream) {
  if (!ptr.get()) return;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  Block* b = ptr.get_deleter() == &deleteBlock ? static_cast<Block*>(ptr.get_context()) : findBlock(ptr.get());
  if (!b) return;
  if (stream.id() == b->stream && stream.device_index() == b->device) return;
  for (const auto& u : b->uses)
    if (u == stream) return;
  b->uses.push_back(stream);
}

stats::DeviceStats CachingAllocator::getDeviceStats(c10::DeviceIndex device) {
  checkIndex(device);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return g_devices[device].stats;
}

void CachingAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  checkIndex(device);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto& s = g_devices[device].stats;
  forEachStat(s, [](c10::CachingAllocator::Stat& st) { st.reset_accumulated(); });
  s.num_alloc_retries = 0;
  s.num_ooms = 0;
  s.num_device_alloc = 0;
  s.num_device_free = 0;
}

void CachingAllocator::resetPeakStats(c10::DeviceIndex device) {
  checkIndex(device);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  forEachStat(g_devices[device].stats, [](c10::CachingAllocator::Stat& st) { st.reset_peak(); });
}

std::pair<size_t, size_t> CachingAllocator::getMemoryInfo(c10::DeviceIndex device) {
  const c10::DeviceIndex prev = currentDevice();
  setCurrentDevice(device);
  size_t free_b = 0, total_b = 0;
  shim::Status st = shim::memGetInfo(&free_b, &total_b);
  setCurrentDevice(prev);
  throwIfFailed(st, "memGetInfo");
  return {free_b, total_b};
}

void CachingAllocator::setMemoryFraction(double fraction, c10::DeviceIndex device) {
  checkIndex(device);
  TORCH_CHECK_VALUE(fraction >= 0 && fraction <= 1, "invalid memory fraction ", fraction, " for ",
                    personality().device, ":", int(device), ": the allowed range is 0 to 1");
  const size_t total = getMemoryInfo(device).second;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  DeviceState& d = g_devices[device];
  d.fraction = fraction;
  d.limit = fraction >= 1 ? 0 : std::max<size_t>(1, static_cast<size_t>(fraction * static_cast<double>(total)));
}

double CachingAllocator::memoryFraction(c10::DeviceIndex device) {
  checkIndex(device);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return g_devices[device].fraction;
}

size_t CachingAllocator::allocatedBytes(c10::DeviceIndex device) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  return static_cast<size_t>(g_devices[device].stats.allocated_bytes[0].current);
}

std::string CachingAllocator::summary(c10::DeviceIndex device) {
  const stats::DeviceStats s = getDeviceStats(device);
  std::string out;
  char line[256];
  const std::string title = personality().device + " memory summary, device " + std::to_string(device);
  out += "|" + std::string(75, '=') + "|\n";
  std::snprintf(line, sizeof line, "| %-73s |\n", title.c_str());
  out += line;
  out += "|" + std::string(75, '-') + "|\n";
  std::snprintf(line, sizeof line, "| %-22s | %14s | %14s | %14s |\n", "Metric", "Current", "Peak",
                "Tot. Alloc");
  out += line;
  auto row = [&](const char* name, const c10::CachingAllocator::StatArray& a, bool bytes) {
    const auto& st = a[0];
    auto fmt = [&](int64_t v) { return bytes ? mib(static_cast<double>(v)) : std::to_string(v); };
    std::snprintf(line, sizeof line, "| %-22s | %14s | %14s | %14s |\n", name, fmt(st.current).c_str(),
                  fmt(st.peak).c_str(), fmt(st.allocated).c_str());
    out += line;
  };
  row("Allocated memory", s.allocated_bytes, true);
  row("Active memory", s.active_bytes, true);
  row("Requested memory", s.requested_bytes, true);
  row("Reserved memory", s.reserved_bytes, true);
  row("Allocations", s.allocation, false);
  row("Device segments", s.segment, false);
  std::snprintf(line, sizeof line, "| %-22s | %14lld | %-31s |\n", "Allocation retries",
                static_cast<long long>(s.num_alloc_retries), "");
  out += line;
  std::snprintf(line, sizeof line, "| %-22s | %14lld | %-31s |\n", "Out-of-memory errors",
                static_cast<long long>(s.num_ooms), "");
  out += line;
  out += "|" + std::string(75, '=') + "|\n";
  return out;
}

std::vector<SegmentSnapshot> CachingAllocator::segments() {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  std::vector<SegmentSnapshot> out;
  for (size_t i = 0; i < kMaxDevices; ++i) {
    DeviceState& d = g_devices[i];
    std::unordered_map<const Block*, const char*> state;
    for (const auto& [size, b] : d.cached) state[b] = "inactive";
    for (const auto& [b, events] : d.pending) state[b] = "active_pending_free";
    for (const auto& [ptr, b] : d.blocks) {
      SegmentSnapshot s;
      s.device = static_cast<c10::DeviceIndex>(i);
      s.address = reinterpret_cast<uint64_t>(b->ptr);
      s.size = b->size;
      s.used = b->used;
      s.requested = b->requested;
      s.stream = b->stream;
      auto it = state.find(b);
      s.state = it == state.end() ? "active_allocated" : it->second;
      s.context = b->context;
      out.push_back(std::move(s));
    }
  }
  std::sort(out.begin(), out.end(), [](const SegmentSnapshot& a, const SegmentSnapshot& b) {
    return a.device != b.device ? a.device < b.device : a.address < b.address;
  });
  return out;
}

CachingAllocator& deviceAllocator() {
  static CachingAllocator a;
  return a;
}

namespace {

// ResultMemory.h's lender: the choice allocate() would make, without its side effects (no
// pending frees collected: their event queries cost simulated host time).
void* lendCached(size_t bytes) {
  const c10::DeviceIndex device = currentDevice();
  const c10::StreamId stream = accel::currentStream(device).id();
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  DeviceState& d = g_devices[device];
  auto it = bestFit(d, roundUp(bytes), stream, /*lending=*/true);
  if (it == d.cached.end()) return nullptr;
  g_lent.emplace(it->second->ptr, std::this_thread::get_id());
  return it->second->ptr;
}

void giveBackLent(void* block) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  g_lent.erase(block);
}

const bool g_lender_registered = [] {
  kernels::setCachedBlockLender({&lendCached, &giveBackLent});
  return true;
}();

// Simulated host microseconds since `start_ps` (the host cost the runtime charged a call).
int64_t hostMicrosSince(uint64_t start_ps) {
  uint64_t now = 0;
  (void)shim::hostTimePs(&now);
  return static_cast<int64_t>((now - start_ps) / 1000000);
}

struct PinnedAllocator final : public at::HostAllocator {
  static void release(void* p) { static_cast<PinnedAllocator&>(pinnedAllocator()).free(p); }

  at::DataPtr allocate(size_t bytes) override {
    void* p = nullptr;
    if (bytes > 0) {
      uint64_t start = 0;
      (void)shim::hostTimePs(&start);
      throwIfFailed(shim::hostMalloc(&p, bytes), "pinned host malloc");
      const int64_t us = hostMicrosSince(start);
      std::lock_guard<std::mutex> lock(mutex_);
      sizes_[p] = bytes;
      for (auto* s : {&stats_.active_requests, &stats_.allocations}) s->increase(1);
      for (auto* s : {&stats_.active_bytes, &stats_.allocated_bytes}) s->increase(bytes);
      stats_.host_alloc_time.increase(us);
      stats_.num_host_alloc++;
    }
    return at::DataPtr(p, p, &release, c10::Device(c10::DeviceType::CPU));
  }
  at::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  // Blocks are not reused (each goes back to the runtime when freed): a stream's use of one
  // needs no event to keep it from being handed out again.
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    eachStat([](auto& s) { s.reset_accumulated(); });
    stats_.num_host_alloc = stats_.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    eachStat([](auto& s) { s.reset_peak(); });
  }

 private:
  // `f` on every counter and duration of the statistics (both kinds reset alike).
  template <class F>
  void eachStat(F f) {
    for (auto* s : {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations, &stats_.allocated_bytes}) f(*s);
    f(stats_.host_alloc_time);
    f(stats_.host_free_time);
  }

  void free(void* p) {
    if (!p) return;
    uint64_t start = 0;
    (void)shim::hostTimePs(&start);
    (void)shim::hostFree(p);
    const int64_t us = hostMicrosSince(start);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    for (auto* s : {&stats_.active_requests, &stats_.allocations}) s->decrease(1);
    for (auto* s : {&stats_.active_bytes, &stats_.allocated_bytes}) s->decrease(it->second);
    stats_.host_free_time.increase(us);
    stats_.num_host_free++;
    sizes_.erase(it);
  }

  std::mutex mutex_;
  std::unordered_map<void*, size_t> sizes_;
  at::HostStats stats_;
};

}  // namespace

at::HostAllocator& pinnedAllocator() {
  static PinnedAllocator a;
  return a;
}

}  // namespace cardsim::accel

namespace {
cardsim::accel::CachingAllocator* const g_registered = [] {
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &cardsim::accel::deviceAllocator());
  // Without one, torch.accelerator.empty_host_cache() (and so torch.accelerator.Graph's
  // `with`) dereferences a null host allocator.
  at::setHostAllocator(c10::DeviceType::PrivateUse1, &cardsim::accel::pinnedAllocator());
  return &cardsim::accel::deviceAllocator();
}();
}  // namespace
