// The card's memory (LPDDR or HBM): capacity, bandwidth and latency, shared by every
// kernel, copy and memset on the card. Interleaved channels or stacks are modelled as
// one pipe of their summed bandwidth, since addresses spread traffic evenly over them.
#pragma once

#include <systemc>

#include "device_models/DeviceParams.h"
#include "device_models/SharedPipe.h"

namespace cardsim::model {

class MemoryChannel : public sc_core::sc_module {
 public:
  MemoryChannel(sc_core::sc_module_name name, const MemoryParams& params);

  // Moves `bytes` through the memory; `weight` is the requester's share (clusters in use).
  void transfer(double bytes, double weight, Waiter* w) { pipe_.start(bytes, weight, w); }
  const MemoryParams& params() const { return params_; }
  const FairShare& stats() const { return pipe_.share(); }

 private:
  void onWake() { pipe_.onWake(); }
  MemoryParams params_;
  SharedPipe pipe_;
};

}  // namespace cardsim::model
