#include "device_models/EventUnit.h"

#include "device_models/StreamQueue.h"

namespace cardsim::model {

EventUnit::EventUnit(sc_core::sc_module_name name, QueueLookup lookup)
    : sc_module(name), lookup_(std::move(lookup)) {}

void EventUnit::record(EventSlot& slot) {
  slot.time_ps.store(static_cast<TimePs>(sc_core::sc_time_stamp().value()),
                     std::memory_order_relaxed);
  slot.done.store(true, std::memory_order_release);
  ++recorded_;
}

void EventUnit::waitFor(const QueuePoint& point) {
  StreamQueue* q = lookup_(point.device, point.queue);
  if (!q) return;
  while (q->completed() < point.seq) sc_core::wait(q->progressed());
}

}  // namespace cardsim::model
