// The fabric links' loads of a recorded run, for the Perfetto export's link counters: each
// fabric collective of the trace timed again by the fabric model of the recording's own
// configuration, its bytes per link spread over the span the model gave it (the recorded
// end, minus the time alone the recording got from the model).
#pragma once

#include <string>

#include "traces/export/PerfettoWriter.h"
#include "traces/export/RunTimeline.h"

namespace cardsim::cli {

// Empty, with `why` set, when the recording has no fabric collective or its configuration
// has no fabric.
timeline::PerfettoWriter::LinkLoads fabricLinkLoads(const timeline::RunTimeline& run, std::string* why);

}  // namespace cardsim::cli
