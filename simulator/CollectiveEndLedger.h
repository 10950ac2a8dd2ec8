// The answered collectives' ends the fabric server may still move later (its Revise: a
// collective answered after one shares its links), by the server's key (group and sequence
// number), and how far the simulation was let run past such ends. A run stops at the first
// end held here unless a request needs what lies behind it; it then seals that end (drops
// it: its collective may complete there, so it can no longer move). Thread-safe: host
// threads hold and move ends while the simulation reads the first one. Plain arithmetic,
// no SystemC.
#pragma once

#include <atomic>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "device_models/Command.h"

namespace cardsim::sim {

class CollectiveEndLedger {
 public:
  static constexpr model::TimePs kNone = std::numeric_limits<model::TimePs>::max();
  using Key = std::pair<std::string, uint64_t>;   // the collective's group, its sequence number

  // Holds `end` under `key`, unless it is sealed already (at or before sealed()).
  void hold(const Key& key, std::shared_ptr<model::CollectiveEnd> end);
  // Moves the end held under `key` to `to`, only later; an end not held (sealed, or never
  // held) keeps where it is: the simulation may have completed its collective there.
  void move(const Key& key, model::TimePs to);
  // The earliest end held (kNone: none); a lock-free answer when none is held.
  model::TimePs first() const;
  // Lets the simulation past every end at or before `to`.
  void seal(model::TimePs to);
  // How far the simulation may have run: ends at or before it are sealed.
  model::TimePs sealed() const;

 private:
  mutable std::mutex mutex_;
  std::map<Key, std::shared_ptr<model::CollectiveEnd>> held_;
  std::atomic<bool> any_{false};   // !held_.empty(), read without the lock (most runs hold none)
  model::TimePs sealed_ = 0;
};

}  // namespace cardsim::sim
