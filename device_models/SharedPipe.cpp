#include "device_models/SharedPipe.h"

#include <cmath>

#include "device_models/SimTime.h"

namespace cardsim::model {

void SharedPipe::start(double bytes, double weight, Waiter* w, double cap_bytes_per_s) {
  share_.advanceTo(sc_core::sc_time_stamp().to_seconds());
  share_.add(bytes, weight, w, cap_bytes_per_s);
  reschedule();
}

void SharedPipe::cancel(Waiter* w) {
  share_.advanceTo(sc_core::sc_time_stamp().to_seconds());
  if (share_.remove(w)) reschedule();
}

void SharedPipe::onWake() {
  share_.advanceTo(sc_core::sc_time_stamp().to_seconds());
  for (void* cookie : share_.popFinished()) static_cast<Waiter*>(cookie)->signal();
  reschedule();
}

void SharedPipe::reschedule() {
  wake_.cancel();
  const double s = share_.secondsToNextFinish();
  if (s < 0) return;
  wake_.notify(toScTime(s));  // rounded up: the flow is really finished when we wake
}

}  // namespace cardsim::model
