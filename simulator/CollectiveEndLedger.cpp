#include "simulator/CollectiveEndLedger.h"

#include <algorithm>

namespace cardsim::sim {

void CollectiveEndLedger::hold(const Key& key, std::shared_ptr<model::CollectiveEnd> end) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (end->end_ps.load() <= sealed_) return;
  held_[key] = std::move(end);
  any_.store(true, std::memory_order_release);
}

void CollectiveEndLedger::move(const Key& key, model::TimePs to) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = held_.find(key);
  if (it != held_.end() && to > it->second->end_ps.load()) it->second->end_ps.store(to);
}

model::TimePs CollectiveEndLedger::first() const {
  if (!any_.load(std::memory_order_acquire)) return kNone;
  std::lock_guard<std::mutex> lock(mutex_);
  model::TimePs t = kNone;
  for (const auto& [key, end] : held_) t = std::min(t, end->end_ps.load());
  return t;
}

void CollectiveEndLedger::seal(model::TimePs to) {
  std::lock_guard<std::mutex> lock(mutex_);
  sealed_ = std::max(sealed_, to);
  for (auto it = held_.begin(); it != held_.end();)
    it = it->second->end_ps.load() <= sealed_ ? held_.erase(it) : std::next(it);
  any_.store(!held_.empty(), std::memory_order_release);
}

model::TimePs CollectiveEndLedger::sealed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sealed_;
}

}  // namespace cardsim::sim
