// What a (replayed or recorded) trace says about a run: the makespan and, per rank, where
// the time went. Each instant of a rank's span (its first host call to its last device
// completion) is counted once, under the first of: compute (a compute-bound kernel runs),
// memory (a memory-bound kernel, memset or on-card copy runs), copies (a host<->device or
// peer copy runs), exposed communication (only a collective runs), idle. Communication is
// also reported whole (overlapped or not).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace cardsim::replay {

// A device step of computation known only by its duration (a Chakra node without work) is
// replayed as a pre-timed step named with this prefix, and reported as compute.
inline constexpr char kComputeStepPrefix[] = "compute: ";

struct Breakdown {
  double total_us = 0;
  double compute_us = 0;
  double memory_bound_us = 0;
  double copies_us = 0;
  double communication_us = 0;
  double exposed_communication_us = 0;
  double idle_us = 0;
};

struct KernelTotal {
  std::string name;
  uint64_t count = 0;
  double time_us = 0;
  bool memory_bound = false;   // most of its time
};

// Busy fractions of one card over its rank's span: compute (any kernel), memory bandwidth
// (bytes kernels, memsets and on-card copies moved over what the memory could have moved),
// DMA (any host<->device or peer copy), fabric (any collective).
struct Utilization {
  int device = 0;
  // clusters: cluster time held by kernels over the device's clusters x the run; compute:
  // the share of the run any kernel runs.
  double clusters = 0, compute = 0, memory_bandwidth = 0, dma = 0, fabric = 0;
};

struct RankReport {
  int rank = 0;
  std::string file;
  Breakdown breakdown;
  uint64_t calls = 0, device_commands = 0;
  std::vector<Utilization> utilization;
};

// What bound the run: walking back from the last device completion, each step goes to
// what the current command waited for — the previous command on its stream, the event it
// waited on, the slowest member of its collective (another rank), a busy card, or the host
// (the host's time since the device work it last waited for counts as a host gap).
struct PathItem {
  std::string kind;    // "kernel", "copy", "memset", "collective", "host", "wait"
  std::string name;    // kernel name, collective op, "host gap"
  double time_us = 0;
  uint64_t count = 0;
};
struct CriticalPath {
  double total_us = 0;                    // time covered by the path
  std::map<std::string, double> by_kind;  // kind -> us
  std::vector<PathItem> items;            // by time on the path, longest first (the top ones)
  uint64_t items_left_off = 0;            // items past the top ones, not listed
  double items_left_off_us = 0;           // ... and their time on the path
};

// One fabric link over the replay: the bytes the collectives put on it, the time they keep
// it busy at its bandwidth, and that time over total_us. From the fabric server, so only
// replays of two or more recorded ranks (joined through it) have them.
struct LinkLoad {
  std::string name;           // "dev0->sw0", one direction
  double bytes = 0;
  double busy_us = 0;
  double utilization = 0;
};

struct Report {
  std::string preset;         // of the (replayed) trace
  // Which configuration the replay ran on: "as recorded" or "recorded, with --set" (the
  // recording's own, resolved), else "preset" or "preset, with --set" (--preset).
  std::string configuration;
  std::string device_name;
  int world_size = 1;
  double total_us = 0;        // first host call to last device completion, across ranks
  std::vector<RankReport> ranks;
  std::vector<KernelTotal> top_kernels;   // by time, across ranks, longest first
  uint64_t kernels_left_off = 0;          // kernels (by name) past the top ones, not listed
  CriticalPath critical_path;
  std::vector<LinkLoad> links;            // busiest first (see LinkLoad)
  std::vector<std::string> notes;         // what the reader should know (a recording cut short)
};

// Reads `files` (rank -> path; the rank files of one run). Throws trace::TraceError.
Report analyze(const std::map<int, std::string>& files, std::size_t top = 10);

}  // namespace cardsim::replay
