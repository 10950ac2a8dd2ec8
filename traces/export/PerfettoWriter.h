// Writes a recorded run as Chrome Trace Event JSON, the object form
// {"displayTimeUnit": "ns", "otherData": {...}, "traceEvents": [...]}, which Perfetto
// (ui.perfetto.dev) and chrome://tracing open:
//   - a process per rank's host with a track per host thread, the host calls as slices at
//     their virtual host times; a process per card ("rank 0 · MLU370-X8 #0") with a track
//     per stream, each device command a slice ("X") named from the trace's Name table, its
//     flops, bytes, kind and call in args;
//   - counters ("C"): memory in use per card (and pinned or registered host memory per
//     rank), after each allocation and free;
//   - flows ("s"/"f"): from each host call to the commands it submitted, from an event's
//     record to the waits on it, between the members of one collective across ranks.
// Times are microseconds with the picoseconds kept as decimals. Slices on a track are
// disjoint or properly nested; a device command that overlaps another on its stream (the
// model runs a stream's commands in order, so none should) goes to an overflow track.
// Events are in the order Perfetto's importer processes them, so that each flow binds to
// its own slice; the output depends on the trace alone (same trace, same bytes).
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "traces/export/RunTimeline.h"

namespace cardsim::timeline {

class PerfettoWriter {
 public:
  struct Summary {
    uint64_t host_slices = 0;
    uint64_t device_slices = 0;
    uint64_t tracks = 0;
    uint64_t overflow_tracks = 0;   // device tracks for commands that overlapped on a stream
    uint64_t flows = 0;             // start/finish pairs
    uint64_t memory_samples = 0;    // memory-in-use counter steps
    uint64_t link_counters = 0;     // links with a utilization counter
    uint64_t link_samples = 0;      // their steps
  };

  // A fabric link busy with a collective: its share of the link's bandwidth over a span.
  struct LinkLoad {
    uint64_t begin_ps = 0, end_ps = 0;
    double utilization = 0;
  };
  using LinkLoads = std::map<std::string, std::vector<LinkLoad>>;   // by link name

  explicit PerfettoWriter(const RunTimeline& run) : run_(run) {}
  // Link counters: a "fabric" process with a counter per link, its utilization over time
  // (overlapping loads add up). The caller times them (cardsim export: the fabric model).
  void setLinkLoads(LinkLoads loads) { links_ = std::move(loads); }

  // Writes the document; the caller checks the stream for write errors.
  Summary write(std::ostream& out) const;

 private:
  const RunTimeline& run_;
  LinkLoads links_;
};

}  // namespace cardsim::timeline
