#include "device_models/SharedPipe.h"

#include <cmath>

namespace cardsim::model {

void SharedPipe::start(double bytes, double weight, Waiter* w) {
  share_.advanceTo(sc_core::sc_time_stamp().to_seconds());
  share_.add(bytes, weight, w);
  reschedule();
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
  // Round up to the next picosecond so the flow is really finished when we wake.
  const double ps = std::ceil(s * 1e12 - 1e-6);
  wake_.notify(sc_core::sc_time(ps > 0 ? ps : 0, sc_core::SC_PS));
}

}  // namespace cardsim::model
