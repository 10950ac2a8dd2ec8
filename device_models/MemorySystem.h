// The card's memory (LPDDR or HBM) as the requesters see it: capacity, bandwidth and
// latency, shared by every kernel, copy and memset on the card. Addresses interleave over
// the channels (or stacks) at a fine grain, so every stream of traffic spreads evenly
// over all of them; the model is therefore one shared bandwidth, the channels' sum, and
// `memory.channels` is descriptive only.
//
// Sharing rule (weighted max-min, FairShare): a kernel holding k of the card's N clusters
// weighs k/N and draws at most k x memory.cluster_bandwidth (each cluster has one port
// into the memory system); a DMA engine weighs dma.memory_weight, uncapped (its host-link
// leg has its own pipe); a collective's traffic weighs as a DMA engine and draws at most
// what its fabric time needs. Whatever a capped requester leaves goes to the others.
#pragma once

#include <systemc>

#include "device_models/DeviceParams.h"
#include "device_models/SharedPipe.h"

namespace cardsim::model {

class MemorySystem : public sc_core::sc_module {
 public:
  MemorySystem(sc_core::sc_module_name name, const MemoryParams& params);

  // Moves `bytes` for a kernel holding `clusters` of the card's `total_clusters`.
  void transferForClusters(double bytes, uint32_t clusters, uint32_t total_clusters, Waiter* w);
  // Moves `bytes` for a DMA engine of weight `weight`.
  void transferForDma(double bytes, double weight, Waiter* w) { pipe_.start(bytes, weight, w); }
  // A collective's reads and writes of this card's memory, spread over its time on the
  // fabric: `bytes` at no more than `cap_bytes_per_s`, at `weight`.
  void loadForCollective(double bytes, double cap_bytes_per_s, double weight, Waiter* w) {
    pipe_.start(bytes, weight, w, cap_bytes_per_s);
  }
  // Stops `w`'s flow where it is (a collective that ended first: the fabric sets its time).
  void cancel(Waiter* w) { pipe_.cancel(w); }
  const MemoryParams& params() const { return params_; }
  const FairShare& stats() const { return pipe_.share(); }

 private:
  void onWake() { pipe_.onWake(); }
  MemoryParams params_;
  SharedPipe pipe_;
};

}  // namespace cardsim::model
