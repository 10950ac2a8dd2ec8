// Collectives reported to the fabric server whose answers are awaited later (CollectiveDesc
// answer_later): the caller's bytes move while the server gathers the other members, and
// the answer is read once they have moved, instead of the two waits taking turns. Until its
// answer a collective's end is unknown, so whichever thread is about to run the simulation
// settles every pending one first (Simulator::setBeforeRun); a failure is kept for the
// thread that launched it, which reports it (shim fabricSettle). No SystemC, no torch.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "device_models/Command.h"
#include "simulator/FabricClient.h"

namespace cardsim::shim::simbackend {

class FabricAnswers {
 public:
  struct Pending {
    uint64_t ticket = 0;                          // FabricClient::arrive's
    sim::FabricClient::Collective collective;     // as reported
    std::shared_ptr<model::CollectiveEnd> end;    // its command's end, set from the answer
    std::thread::id owner;                        // the thread that launched it
  };
  // What an answer means for the simulation (its end, the revisions it brings).
  using Apply = std::function<void(const Pending&, const sim::FabricClient::Completion&)>;

  // Before the collective's command is submitted (a run that takes the command finds it).
  void add(Pending p);
  // Whether any answer is outstanding (lock-free: asked before every run).
  bool any() const { return any_.load(std::memory_order_acquire); }
  // Awaits every outstanding answer in arrival order and applies it; a failed one ends at
  // its arrival (the simulation goes on) and its words are kept for its owner. One settler
  // at a time: a second caller returns once the first has settled everything.
  void settleAll(sim::FabricClient& client, const Apply& apply);
  // The calling thread's first failure since it last asked ("": none); cleared.
  std::string takeFailure();

 private:
  std::mutex settle_mutex_;
  std::mutex mutex_;   // pending_, failed_
  std::deque<Pending> pending_;
  std::atomic<bool> any_{false};
  std::map<std::thread::id, std::string> failed_;
};

}  // namespace cardsim::shim::simbackend
