// Glue between FairShare (arithmetic) and simulated time: one shared bandwidth whose
// flows signal a Waiter when done. Owned by the modules that model a pipe
// (MemorySystem, HostLink); each registers an SC_METHOD on wakeEvent() calling onWake().
#pragma once

#include <systemc>

#include "device_models/FairShare.h"

namespace cardsim::model {

// A requester waiting for `pending` flows; `done` fires when the last one finishes.
struct Waiter {
  int pending = 0;
  sc_core::sc_event done;
  void signal() {
    if (--pending == 0) done.notify(sc_core::SC_ZERO_TIME);
  }
};

class SharedPipe {
 public:
  explicit SharedPipe(double bytes_per_s) : share_(bytes_per_s) {}

  // Starts moving `bytes` at `weight`, never faster than `cap_bytes_per_s`; the waiter's
  // pending count must already include this flow.
  void start(double bytes, double weight, Waiter* w, double cap_bytes_per_s = FairShare::kNoCap);
  // Stops the flow of `w` where it is (its waiter is not signalled).
  void cancel(Waiter* w);
  void onWake();
  const sc_core::sc_event& wakeEvent() const { return wake_; }
  const FairShare& share() const { return share_; }

 private:
  void reschedule();
  FairShare share_;
  sc_core::sc_event wake_;
};

}  // namespace cardsim::model
