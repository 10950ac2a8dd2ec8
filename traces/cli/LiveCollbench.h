// The live path of `cardsim collbench`: N rank processes run the collective through
// torch.distributed's cncl/bccl backend on emulated devices (python -m cardsim_torch.collbench),
// timed with device events; this side starts them and reads their measurements.
#pragma once

#include <string>
#include <vector>

namespace cardsim::cli {

struct LiveJob {
  std::string preset;
  long long ranks = 0;
  long long nodes = 1;
  std::string op;
  std::string algo;                     // empty: the backend's own choice
  std::vector<std::string> overrides;   // key.path=value, after CARDSIM_CONFIG's
  std::vector<double> sizes;            // bytes per row, nccl-tests' size
  long long iters = 5, warmup = 1;
  std::string execution = "timing";     // timing | full
};

struct LiveRow {
  double bytes;     // as moved (rounded down to whole elements per rank)
  double time_us;   // mean over ranks of the event-measured time per iteration
};

// Runs the job; throws std::runtime_error with the ranks' own message when it fails.
std::vector<LiveRow> runLiveCollbench(const LiveJob& job);

// The Python interpreter with torch_mlu/torch_supa: CARDSIM_PYTHON, else the build's.
std::string cardsimPython();

}  // namespace cardsim::cli
