#include "ResultMemory.h"

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace cardsim::kernels {
namespace {

thread_local bool t_active = false;
CachedBlockLender g_lender;

// Device blocks lent as CPU memory and not yet freed by the CPU side, by address (a count:
// a block may be lent again once the device tensor that took it is freed). Not the device
// allocator's list of lent blocks, which drops a block once a device tensor takes it: this
// one tells raw_deallocate's pointers of ours from the CPU allocator's until the CPU side
// frees them, without the device allocator's lock on every raw free of the process.
std::mutex g_mutex;
std::unordered_map<void*, int> g_lent;
std::atomic<size_t> g_lent_count{0};

// The CPU side freed memory at `p`: if it was a lent block, the lending ends (the block
// itself stays with the device allocator). False if `p` was not lent.
bool endLending(void* p) {
  if (g_lent_count.load(std::memory_order_acquire) == 0) return false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_lent.find(p);
    if (it == g_lent.end()) return false;
    if (--it->second == 0) g_lent.erase(it);
    g_lent_count.fetch_sub(1, std::memory_order_release);
  }
  g_lender.give_back(p);
  return true;
}

void lentDeleter(void* p) { (void)endLending(p); }

c10::Allocator* g_cpu = nullptr;   // the CPU allocator in place before ours

// Both kinds of pointer reach raw_deallocate (oneDNN's scratchpads use the raw interface).
void rawDelete(void* p) {
  if (!endLending(p)) g_cpu->raw_deleter()(p);
}

class ResultAllocator final : public c10::Allocator {
 public:
  at::DataPtr allocate(size_t n) override {
    if (t_active && n >= kDeviceResultMinBytes && g_lender.lend)
      if (void* p = g_lender.lend(n)) {
        {
          std::lock_guard<std::mutex> lock(g_mutex);
          ++g_lent[p];
          g_lent_count.fetch_add(1, std::memory_order_release);
        }
        // Context == data, as the raw interface (raw_allocate) requires.
        return at::DataPtr(p, p, &lentDeleter, at::Device(at::kCPU));
      }
    return g_cpu->allocate(n);
  }
  at::DeleterFnPtr raw_deleter() const override { return g_cpu->raw_deleter() ? &rawDelete : nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

ResultAllocator g_allocator;

// Wraps the CPU allocator once, when the extension loads (c10 registered its own before).
const bool g_installed = [] {
  g_cpu = c10::GetAllocator(c10::DeviceType::CPU);
  c10::SetAllocator(c10::DeviceType::CPU, &g_allocator, /*priority=*/0);
  return true;
}();

}  // namespace

void setCachedBlockLender(CachedBlockLender lender) { g_lender = lender; }

DeviceResultScope::DeviceResultScope(bool active) : previous_(t_active) { t_active = active; }
DeviceResultScope::~DeviceResultScope() { t_active = previous_; }

}  // namespace cardsim::kernels
