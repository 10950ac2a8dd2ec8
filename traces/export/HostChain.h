// A rank's host time as a chain of steps, for exporters whose formats keep host work as
// nodes of its own (Chakra's CPU nodes: ASTRA-sim runs them one at a time on the host,
// beside the device's nodes).
//
// The calls that reach the device (a launch, a copy, a collective, an event record or wait
// of the program) and the synchronizations that made the host wait are the chain's joints;
// between two joints the host spent the recorded time in between (its own work and every
// other call: allocations, queries, ...). A step is that time; it comes after the step
// before it and, after a synchronization, after the commands that synchronization waited
// for. Each command a joint issued comes after the step before its call. So the device
// sees the program's host pace: replayed, each call lands where it did.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <unordered_map>
#include <vector>

#include "traces/export/RunTimeline.h"

namespace cardsim::timeline {

struct HostStep {
  uint64_t begin_ps = 0;              // the host time it starts (the previous joint's return)
  uint64_t duration_ps = 0;           // host time until the next joint's call
  std::vector<std::size_t> waits;     // commands the host waited for first (indices into commands())
  std::vector<int> synchronized_devices;   // devices whose every stream it waited for (a
                                           // device synchronize: its waits include theirs)
  // The synchronizing calls it waited in (before begin_ps), in the order they were made: a
  // replay makes them again, each costing what the model says (the call's own time when its
  // work is done by then), and so must know where each began and what each waited for.
  struct SyncCall {
    uint64_t duration_ps = 0;
    int device = -1;                  // a device synchronize's device (-1: it waited for `waits`)
    std::vector<std::size_t> waits;   // commands it waited for first (indices into commands())
  };
  std::vector<SyncCall> syncs;
  // The runtime's own event waits in its time (a Work's wait(): a wait on an event the runtime
  // recorded for itself), in order. They are no nodes (the node after each on its stream
  // depends on what it waited for); listed, a replay makes its own wait there, in their time,
  // rather than before that node (where its call's host time would count a second time).
  struct MarkerWait {
    uint64_t duration_ps = 0;
    int device = 0;
    uint32_t stream = 0;              // the stream that waited
    std::size_t node = RunTimeline::kNone;   // the node it waited for (its event stands behind)
  };
  std::vector<MarkerWait> marker_waits;
};

struct HostChain {
  std::vector<HostStep> steps;   // in host order, each after the one before
  // A command (index into commands()) -> the step its call came after; commands of calls
  // before the first step are not in it.
  std::unordered_map<std::size_t, std::size_t> issued_after;
};

// Rank `rank`'s chain. `nodes`: its commands that the export keeps as nodes (no runtime
// markers), in completion order; waits name only those. A joint's calls are taken in the
// order they returned (the order a replay makes them); host time after the last call that
// reaches the device is left out (a run ends when its device work does).
// `graph_kernels`: the kernels of graph launches that a replay of the export issues as a
// graph's nodes, each without a launch's host cost; a launch of those alone has its own time
// up to its first kernel in the step before it (a replay would lose it otherwise).
HostChain hostChain(const RunTimeline& run, std::size_t rank, const std::vector<std::size_t>& nodes,
                    const std::set<std::size_t>& graph_kernels = {});

}  // namespace cardsim::timeline
