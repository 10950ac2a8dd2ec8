#include "CarriedData.h"

#include <algorithm>
#include <cstring>

namespace cardsim::shim::simbackend {

void CarriedData::note(const void* ptr, std::size_t bytes) {
  if (!ptr || bytes == 0) return;
  std::uintptr_t lo = reinterpret_cast<std::uintptr_t>(ptr);
  std::uintptr_t hi = lo + bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  // Merge with every range it overlaps (not ones it merely touches: those may belong to the
  // next allocation, which is scrubbed on its own).
  auto it = ranges_.upper_bound(lo);
  if (it != ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second > lo) it = prev;
  }
  while (it != ranges_.end() && it->first < hi) {
    lo = std::min(lo, it->first);
    hi = std::max(hi, it->first + it->second);
    it = ranges_.erase(it);
  }
  ranges_.emplace(lo, hi - lo);
}

std::size_t CarriedData::scrub(void* ptr, std::size_t bytes) {
  const std::uintptr_t lo = reinterpret_cast<std::uintptr_t>(ptr);
  std::size_t zeroed = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = ranges_.lower_bound(lo); it != ranges_.end() && it->first < lo + bytes;) {
    std::memset(reinterpret_cast<void*>(it->first), 0, it->second);
    zeroed += it->second;
    it = ranges_.erase(it);
  }
  return zeroed;
}

std::size_t CarriedData::rangesHeld() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ranges_.size();
}

}  // namespace cardsim::shim::simbackend
