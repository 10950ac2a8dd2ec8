// One hardware queue of a card: runs its commands strictly in order, each no earlier
// than the host handed it over. Runtime streams map onto these; streams beyond the
// card's queue count share one and so serialize, as on real cards.
#pragma once

#include <deque>
#include <systemc>

#include "device_models/Command.h"
#include "device_models/SharedPipe.h"

namespace cardsim::model {

class Card;

class StreamQueue : public sc_core::sc_module {
 public:
  StreamQueue(sc_core::sc_module_name name, Card& card, QueueId id);

  // Called by the simulation thread between runs, never from a SystemC process.
  void push(Command cmd);

  QueueId id() const { return id_; }
  uint64_t completed() const { return completed_; }
  std::size_t pending() const { return queue_.size(); }
  const sc_core::sc_event& progressed() const { return progressed_; }

 private:
  void run();

  Card& card_;
  QueueId id_;
  std::deque<Command> queue_;
  bool idle_ = true;
  bool started_ = false;   // its thread exists (made at the first command)
  uint64_t completed_ = 0;
  sc_core::sc_event arrival_;
  sc_core::sc_event progressed_;
  Waiter waiter_;
};

}  // namespace cardsim::model
