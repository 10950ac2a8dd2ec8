// sc_spawn: queue threads are made when first used.
#define SC_INCLUDE_DYNAMIC_PROCESSES
#include "device_models/StreamQueue.h"

#include "device_models/Card.h"

namespace cardsim::model {

StreamQueue::StreamQueue(sc_core::sc_module_name name, Card& card, QueueId id)
    : sc_module(name), card_(card), id_(id) {}

void StreamQueue::push(Command cmd) {
  queue_.push_back(std::move(cmd));
  if (!started_) {
    // The queue's thread is made at its first command: a card has 16 or more queues and a
    // program uses a few (each thread costs a stack and a switch to it at the first run).
    // It first runs at the arrival notified below, in the same delta cycle as a thread
    // made up front and waiting for it would.
    started_ = true;
    sc_core::sc_spawn_options o;
    o.set_sensitivity(&arrival_);
    o.dont_initialize();
    sc_core::sc_spawn([this] { run(); }, nullptr, &o);
  }
  if (idle_) {
    idle_ = false;
    arrival_.notify(sc_core::SC_ZERO_TIME);
  }
}

void StreamQueue::run() {
  for (;;) {
    if (queue_.empty()) {
      idle_ = true;
      sc_core::wait(arrival_);
      continue;
    }
    const Command& cmd = queue_.front();
    const TimePs now = sc_core::sc_time_stamp().value();
    if (cmd.ready_ps > now) sc_core::wait(sc_core::sc_time::from_value(cmd.ready_ps - now));
    const TimePs start = sc_core::sc_time_stamp().value();
    card_.execute(*this, cmd, waiter_);
    const TimePs end = sc_core::sc_time_stamp().value();
    ++completed_;
    progressed_.notify(sc_core::SC_ZERO_TIME);
    card_.completed(*this, cmd, start, end);
    queue_.pop_front();
  }
}

}  // namespace cardsim::model
