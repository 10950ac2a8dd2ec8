// What a recorded rank waited at a collective for slower ranks: the collective command's
// recorded end past where it would have ended had every member arrived when this one did
// (its start plus the model's time for it alone, and no earlier than its launch). A rank
// replicated to N (cardsim replay --ranks N) reaches each collective that much later, so
// that on the recorded configuration the replay ends it where the recording did. Shared by
// the replay (from the recorded command) and the Chakra export (which carries the figure,
// having no command records to carry it).
#pragma once

#include <algorithm>
#include <cstdint>

#include "traces/proto/trace.pb.h"

namespace cardsim::trace {

class PeersLate {
 public:
  // For each non-pre-timed collective call of one rank, in call order; `start_ps`/`end_ps`
  // its recorded command's (null: none recorded, the figure is 0).
  uint64_t at(const Envelope& call, const uint64_t* start_ps, const uint64_t* end_ps) {
    const Collective& c = call.collective();
    // A collective call returns once launched (the host's cost of issuing it), a barrier
    // only once it completes: a barrier's launch is taken to cost what the last other one did.
    if (c.op() != "barrier" && call.host_end_ps() >= call.host_begin_ps())
      launch_ps_ = call.host_end_ps() - call.host_begin_ps();
    if (!start_ps || !end_ps) return 0;
    const uint64_t alone_ps = static_cast<uint64_t>(c.seconds() * 1e12 + 0.5);   // model::secondsToPs
    const uint64_t alone = std::max(*start_ps + alone_ps, call.host_begin_ps() + launch_ps_);
    return *end_ps > alone ? *end_ps - alone : 0;
  }

 private:
  uint64_t launch_ps_ = 0;
};

}  // namespace cardsim::trace
