// Max-min fair sharing of the fabric's links among transfers (flows), simulated from flow
// arrivals to completions. A flow waits its route's latency (it holds no bandwidth while
// the first bytes travel), then moves its bytes at the max-min fair rate over every link
// of its route, recomputed whenever a flow starts or finishes (MaxMinFair's progressive
// filling: the most loaded link fixes the rate of its flows, the rest share what is left).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "device_models/fabric/Topology.h"

namespace cardsim::fabric {

struct FlowSpec {
  std::vector<LinkId> path;
  double bytes = 0;
  double latency_s = 0;
  double release_s = 0;   // when the flow is handed to the fabric
  uint64_t tag = 0;       // for the caller
};

class FlowSolver {
 public:
  explicit FlowSolver(const Topology& topology) : topology_(topology) {}

  // The max-min fair rates (bytes/s) of flows sharing the topology's links; with `capacity`
  // (bytes/s per link, by LinkId), on those capacities instead of the links' own.
  std::vector<double> rates(const std::vector<const std::vector<LinkId>*>& paths,
                            const std::vector<double>* capacity = nullptr) const;

  // Simulates the flows to completion; returns each flow's completion time. `on_complete`,
  // if given, is called at each completion in time order and may add flows (released no
  // earlier than the completion time) through the `add` it is handed.
  using AddFn = std::function<void(FlowSpec)>;
  std::vector<double> run(std::vector<FlowSpec> flows,
                          const std::function<void(std::size_t flow, double at_s, const AddFn& add)>& on_complete = {});

 private:
  const Topology& topology_;
};

}  // namespace cardsim::fabric
