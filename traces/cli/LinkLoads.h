// The fabric links' loads of a recorded run, for the Perfetto export's link counters: each
// fabric collective of the trace timed again by the fabric model of the recording's own
// configuration, its bytes per link spread over the span the model gave it (the recorded
// end, minus the time alone the recording got from the model).
#pragma once

#include <string>
#include <vector>

#include "device_models/fabric/FabricParams.h"
#include "simulator/FabricModel.h"
#include "traces/export/PerfettoWriter.h"
#include "traces/export/RunTimeline.h"
#include "traces/replay/RankAnalysis.h"

namespace cardsim::cli {

// Empty, with `why` set, when the recording has no fabric collective or its configuration
// has no fabric.
timeline::PerfettoWriter::LinkLoads fabricLinkLoads(const timeline::RunTimeline& run, std::string* why);

// The bytes each fabric link carried in a data-parallel replay (`cardsim replay --ranks N`):
// every collective the replicated rank ran (in order) timed again by `params`' model over its
// group and algorithm, summed per link. The replicated ranks' collectives are the same
// collectives, so one rank's holds every transfer of the job.
sim::FabricModel::LinkLoads retimedLinkLoads(const std::vector<replay::CollectiveCall>& collectives,
                                             const fabric::FabricParams& params);

}  // namespace cardsim::cli
