#include "device_models/StreamQueue.h"

#include "device_models/Card.h"

namespace cardsim::model {

StreamQueue::StreamQueue(sc_core::sc_module_name name, Card& card, QueueId id)
    : sc_module(name), card_(card), id_(id) {
  SC_HAS_PROCESS(StreamQueue);
  SC_THREAD(run);
}

void StreamQueue::push(Command cmd) {
  queue_.push_back(std::move(cmd));
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
