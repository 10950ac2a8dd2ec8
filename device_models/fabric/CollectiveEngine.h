// Times collectives on the fabric. One collective alone on an idle fabric takes the fast
// path: each phase's transfers are solved once (max-min over the links) and the phase's
// time is multiplied by its repeat count, so a 1024-rank ring costs one solve. Collectives
// that overlap in time are simulated transfer by transfer, every phase released when the
// previous one of the same collective has finished, all of them sharing the links.
#pragma once

#include <vector>

#include "device_models/fabric/Collective.h"
#include "device_models/fabric/FlowSolver.h"

namespace cardsim::fabric {

class CollectiveEngine {
 public:
  explicit CollectiveEngine(const Topology& t) : topology_(t) {}

  // Seconds for `s` alone on an idle fabric, the topology's collective latency included
  // (0 for a schedule that moves nothing).
  double timeAlone(const Schedule& s) const;
  // One repetition of a phase, alone; without the routes' latency: a pipeline's chunk behind
  // its first ones.
  double phaseTime(const Phase& p, bool latency = true) const;

  struct Job {
    Schedule schedule;
    double release_s = 0;
  };
  // Completion time of each job when they share the fabric.
  std::vector<double> timeTogether(const std::vector<Job>& jobs) const;

 private:
  FlowSpec flowOf(const Transfer& t, double release_s, bool latency = true) const;
  const Topology& topology_;
};

}  // namespace cardsim::fabric
