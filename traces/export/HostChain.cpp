#include "traces/export/HostChain.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace cardsim::timeline {

namespace {

// Host calls that return only once device work is done.
bool synchronizes(const trace::Envelope& c) {
  switch (c.record_case()) {
    case trace::Envelope::kApi: return c.api().api() == trace::ApiCall::DEVICE_SYNCHRONIZE;
    case trace::Envelope::kStream: return c.stream().op() == trace::StreamOp::SYNCHRONIZE;
    case trace::Envelope::kEvent: return c.event().op() == trace::EventOp::SYNCHRONIZE;
    case trace::Envelope::kMemcpy: return !c.memcpy().async();
    case trace::Envelope::kMemset: return !c.memset().async();
    default: return false;
  }
}

// An event wait of the runtime's own (its command a runtime marker, RunTimeline).
bool runtimeWait(const RunTimeline& run, const trace::Envelope& e,
                 const std::map<std::size_t, std::vector<std::size_t>>& issued, std::size_t call) {
  if (e.record_case() != trace::Envelope::kEvent || e.event().op() != trace::EventOp::WAIT) return false;
  auto it = issued.find(call);
  if (it == issued.end()) return false;
  for (std::size_t i : it->second)
    if (run.commands()[i].runtime_marker && run.commands()[i].command.kind() == trace::DeviceCommand::EVENT_WAIT)
      return true;
  return false;
}

}  // namespace

HostChain hostChain(const RunTimeline& run, std::size_t rank, const std::vector<std::size_t>& nodes,
                    const std::set<std::size_t>& graph_kernels) {
  const auto& calls = run.calls();
  const auto& commands = run.commands();
  std::set<std::size_t> is_node(nodes.begin(), nodes.end());
  std::map<std::size_t, std::vector<std::size_t>> issued;   // call -> its commands (nodes or not)
  for (std::size_t i = 0; i < commands.size(); ++i)
    if (commands[i].rank == rank && commands[i].call != RunTimeline::kNone) issued[commands[i].call].push_back(i);

  HostChain chain;
  uint64_t prev_end = UINT64_MAX;   // the latest joint's return (first: the rank's first call)
  for (const auto& c : calls)
    if (c.rank == rank) prev_end = std::min(prev_end, c.record.host_begin_ps());
  // What the calls so far put on the device: per stream its last node, per event the node
  // its latest record stands behind (itself, or for a runtime's record its stream's last).
  std::map<std::pair<int, uint32_t>, std::size_t> last_on_stream;
  std::map<uint32_t, std::size_t> recorded;
  std::set<std::size_t> pending;   // what synchronizations since the last step waited for
  std::set<std::size_t> waited;    // ... and since the start: waiting again costs only the call
  std::set<int> synchronized;      // ... and the devices they synchronized whole
  std::vector<HostStep::SyncCall> syncs;   // ... and their calls (HostStep)
  std::vector<HostStep::MarkerWait> markers;   // the runtime's own waits since the last joint
  for (std::size_t ci = 0; ci < calls.size(); ++ci) {
    const auto& c = calls[ci];
    if (c.rank != rank || c.record.status() != 0) continue;
    const trace::Envelope& e = c.record;
    std::vector<std::size_t> mine;   // the call's nodes
    if (auto it = issued.find(ci); it != issued.end())
      for (std::size_t i : it->second)
        if (is_node.count(i)) mine.push_back(i);
    // A synchronization waits for what was on the device when it was called, done by then
    // or not (a what-if may make it later): a device's every stream, a stream, an event's
    // record; a blocking copy or memset, itself.
    std::vector<std::size_t> waits;
    bool whole_device = false;
    if (synchronizes(e)) {
      switch (e.record_case()) {
        case trace::Envelope::kApi:
          whole_device = true;
          for (const auto& [stream, i] : last_on_stream)
            if (stream.first == e.device()) waits.push_back(i);
          break;
        case trace::Envelope::kStream:
          if (auto it = last_on_stream.find({e.device(), e.stream().stream()}); it != last_on_stream.end())
            waits.push_back(it->second);
          break;
        case trace::Envelope::kEvent:
          if (auto it = recorded.find(e.event().event()); it != recorded.end()) waits.push_back(it->second);
          break;
        default: waits = mine; break;
      }
    }
    // A synchronization with nothing new to wait for (a stream's after a blocking copy to
    // it) costs only its call: host time, as any other call's.
    waits.erase(std::remove_if(waits.begin(), waits.end(), [&](std::size_t i) { return waited.count(i) > 0; }),
                waits.end());
    // Any other call is no joint: its time is the next step's (what it put on the device
    // still counts, below).
    if (mine.empty() && waits.empty() && runtimeWait(run, e, issued, ci)) {
      auto it = recorded.find(e.event().event());
      markers.push_back({e.host_end_ps() - std::min(e.host_end_ps(), e.host_begin_ps()), e.device(),
                         e.event().stream(), it == recorded.end() ? RunTimeline::kNone : it->second});
    }
    if (!mine.empty() || !waits.empty()) {
      // A graph launch's own time up to its first command (the launch's host cost) is the
      // step's where a replay of the export issues the graph's kernels one by one, each as a
      // graph's node costs, and would lose it (any other call's cost the replay charges again).
      // The rest of its time (a nanosecond per node dispatched) goes to the next step: the
      // replay issues the nodes at once.
      uint64_t at = e.host_begin_ps(), end = e.host_end_ps();
      if (e.record_case() == trace::Envelope::kGraph && e.graph().op() == trace::GraphOp::LAUNCH && !mine.empty() &&
          std::all_of(mine.begin(), mine.end(), [&](std::size_t i) { return graph_kernels.count(i) > 0; })) {
        uint64_t first = UINT64_MAX;
        for (std::size_t i : issued.at(ci)) first = std::min(first, commands[i].command.ready_ps());
        if (first != UINT64_MAX && first > at) at = std::min(first, std::max(e.host_end_ps(), at));
        end = at;
      }
      const uint64_t gap = at > prev_end ? at - prev_end : 0;
      // Synchronizations back to back are one wait; a call reaching the device after one
      // starts a step (of no time, if need be) that waits first.
      if (gap > 0 || (!pending.empty() && !mine.empty())) {
        HostStep s;
        s.begin_ps = prev_end;
        s.duration_ps = gap;
        s.waits.assign(pending.begin(), pending.end());
        s.synchronized_devices.assign(synchronized.begin(), synchronized.end());
        s.syncs = std::exchange(syncs, {});
        s.marker_waits = std::exchange(markers, {});
        pending.clear();
        synchronized.clear();
        chain.steps.push_back(std::move(s));
      }
      markers.clear();   // in no step's time (none since the last joint's return)
      if (mine.empty())   // a synchronization alone (a blocking copy's call is its own node's)
        syncs.push_back({e.host_end_ps() - std::min(e.host_end_ps(), e.host_begin_ps()),
                         whole_device ? e.device() : -1, waits});
      if (!chain.steps.empty())
        for (std::size_t i : mine) chain.issued_after[i] = chain.steps.size() - 1;
      pending.insert(waits.begin(), waits.end());
      waited.insert(waits.begin(), waits.end());
      if (whole_device) synchronized.insert(e.device());
      prev_end = std::max(prev_end, end);
    }
    if (auto it = issued.find(ci); it != issued.end())
      for (std::size_t i : it->second) {
        const trace::DeviceCommand& d = commands[i].command;
        const std::pair<int, uint32_t> stream{d.device(), d.stream()};
        if (is_node.count(i)) last_on_stream[stream] = i;
        if (d.kind() == trace::DeviceCommand::EVENT_RECORD && commands[i].event != 0) {
          if (is_node.count(i)) {
            recorded[commands[i].event] = i;
          } else if (auto last = last_on_stream.find(stream); last != last_on_stream.end()) {
            recorded[commands[i].event] = last->second;
          }
        }
      }
  }
  return chain;
}

}  // namespace cardsim::timeline
