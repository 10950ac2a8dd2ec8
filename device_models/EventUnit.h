// The card's event (notifier) unit: timestamps record points as queues reach them and
// holds queues that wait on a point of another queue, on this card or another.
#pragma once

#include <functional>
#include <systemc>

#include "device_models/Command.h"

namespace cardsim::model {

class StreamQueue;

class EventUnit : public sc_core::sc_module {
 public:
  using QueueLookup = std::function<StreamQueue*(DeviceId, QueueId)>;
  EventUnit(sc_core::sc_module_name name, QueueLookup lookup);

  void record(EventSlot& slot);
  // Blocks the calling queue's thread until `point` has completed.
  void waitFor(const QueuePoint& point);
  uint64_t recorded() const { return recorded_; }

 private:
  QueueLookup lookup_;
  uint64_t recorded_ = 0;
};

}  // namespace cardsim::model
