#include "device_models/fabric/CollectiveEngine.h"

#include <algorithm>

namespace cardsim::fabric {

namespace {
bool movesBytes(const Schedule& s) {
  for (const Phase& p : s.phases)
    if (p.repeat > 0 && !p.transfers.empty()) return true;
  return false;
}
}  // namespace

FlowSpec CollectiveEngine::flowOf(const Transfer& t, double release_s, bool latency) const {
  FlowSpec f;
  f.path = topology_.route(t.src, t.dst);
  f.bytes = t.bytes;
  f.latency_s = latency ? topology_.routeLatency(t.src, t.dst) : 0.0;
  f.release_s = release_s;
  return f;
}

double CollectiveEngine::phaseTime(const Phase& p, bool latency) const {
  std::vector<FlowSpec> flows;
  flows.reserve(p.transfers.size());
  for (const Transfer& t : p.transfers) flows.push_back(flowOf(t, 0, latency));
  FlowSolver solver(topology_);
  double end = 0;
  for (double d : solver.run(std::move(flows))) end = std::max(end, d);
  return end;
}

double CollectiveEngine::timeAlone(const Schedule& s) const {
  if (!movesBytes(s)) return 0;
  double total = topology_.collectiveLatency();
  for (const Phase& p : s.phases) {
    if (p.repeat == 0 || p.transfers.empty()) continue;
    const uint32_t waiting = p.pipeline_depth > 0 ? std::min(p.pipeline_depth, p.repeat) : p.repeat;
    total += waiting * phaseTime(p);
    if (waiting < p.repeat) total += (p.repeat - waiting) * phaseTime(p, false);
    if (p.fill_repeats > 0) total += p.fill_repeats * phaseTime(p, false);
  }
  return total;
}

std::vector<double> CollectiveEngine::timeTogether(const std::vector<Job>& jobs) const {
  struct State {
    size_t phase = 0;
    uint32_t rep = 0;
    size_t outstanding = 0;
    double done = 0;
    double rep_start = 0;      // the current repeat's release
    double rep_latency = 0;    // the route latency its transfers wait out (0: streaming)
  };
  std::vector<State> st(jobs.size());
  std::vector<size_t> owner;          // flow index -> job
  std::vector<FlowSpec> initial;
  // Skips empty phases, a finished one's pipeline fill moving `at` on; returns false when
  // the job has no phase left.
  auto settle = [&](size_t j, double& at) {
    State& s = st[j];
    const auto& phases = jobs[j].schedule.phases;
    while (s.phase < phases.size() && (phases[s.phase].transfers.empty() || s.rep >= phases[s.phase].repeat)) {
      // A ring's pipeline fills after its repeats, in repeats of the time its last one took
      // (slowed with it where other collectives share its links).
      if (phases[s.phase].fill_repeats > 0 && s.rep > 0)
        at += phases[s.phase].fill_repeats * std::max(0.0, at - s.rep_start - s.rep_latency);
      ++s.phase;
      s.rep = 0;
    }
    return s.phase < phases.size();
  };
  auto release = [&](size_t j, double at, const std::function<void(FlowSpec)>& add) {
    State& s = st[j];
    if (!settle(j, at)) {
      s.done = at;
      return;
    }
    const Phase& p = jobs[j].schedule.phases[s.phase];
    s.outstanding = p.transfers.size();
    const bool latency = p.pipeline_depth == 0 || s.rep < p.pipeline_depth;   // (see Phase)
    s.rep_start = at;
    s.rep_latency = 0;
    for (const Transfer& t : p.transfers) {
      owner.push_back(j);
      FlowSpec f = flowOf(t, at, latency);
      s.rep_latency = std::max(s.rep_latency, f.latency_s);
      add(std::move(f));
    }
  };
  const std::function<void(FlowSpec)> add_initial = [&](FlowSpec f) { initial.push_back(std::move(f)); };
  // The fixed cost of the call comes before a collective's first transfer.
  for (size_t j = 0; j < jobs.size(); ++j)
    release(j, jobs[j].release_s + (movesBytes(jobs[j].schedule) ? topology_.collectiveLatency() : 0.0), add_initial);
  FlowSolver solver(topology_);
  solver.run(std::move(initial), [&](size_t flow, double at, const FlowSolver::AddFn& add) {
    const size_t j = owner[flow];
    State& s = st[j];
    if (--s.outstanding > 0) return;
    ++s.rep;
    release(j, at, add);
  });
  std::vector<double> out;
  for (const State& s : st) out.push_back(s.done);
  return out;
}

}  // namespace cardsim::fabric
