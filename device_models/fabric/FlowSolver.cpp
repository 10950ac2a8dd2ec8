#include "device_models/fabric/FlowSolver.h"

#include <algorithm>
#include <limits>
#include <queue>

#include "device_models/fabric/MaxMinFair.h"

namespace cardsim::fabric {

std::vector<double> FlowSolver::rates(const std::vector<const std::vector<LinkId>*>& paths,
                                      const std::vector<double>* given) const {
  MaxMinFair solver;
  solver.reset(topology_.linkCount());
  for (std::size_t l = 0; l < topology_.linkCount(); ++l)
    solver.capacity()[l] = given ? (*given)[l] : topology_.link(LinkId{static_cast<uint32_t>(l)}).params.bandwidth_bytes_per_s;
  std::vector<uint32_t> ids;
  for (const auto* p : paths) {
    ids.clear();
    for (LinkId l : *p) ids.push_back(index(l));
    solver.addFlow(ids.data(), ids.size());   // no links (a device to itself): at once
  }
  solver.solve();
  return solver.rates();
}

std::vector<double> FlowSolver::run(
    std::vector<FlowSpec> flows,
    const std::function<void(std::size_t, double, const AddFn&)>& on_complete) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> done(flows.size(), kInf);
  std::vector<double> remaining;
  for (const FlowSpec& f : flows) remaining.push_back(f.bytes);
  // Flows waiting for their first bytes to arrive, by the time they start moving bytes.
  using Start = std::pair<double, std::size_t>;
  std::priority_queue<Start, std::vector<Start>, std::greater<Start>> pending;
  for (std::size_t i = 0; i < flows.size(); ++i) pending.push({flows[i].release_s + flows[i].latency_s, i});
  std::vector<std::size_t> active;
  std::vector<double> rate;
  double now = 0;
  const AddFn add = [&](FlowSpec f) {
    f.release_s = std::max(f.release_s, now);
    flows.push_back(std::move(f));
    remaining.push_back(flows.back().bytes);
    done.push_back(kInf);
    pending.push({flows.back().release_s + flows.back().latency_s, flows.size() - 1});
  };
  auto recompute = [&] {
    std::vector<const std::vector<LinkId>*> paths;
    for (std::size_t i : active) paths.push_back(&flows[i].path);
    rate = rates(paths);
  };
  std::vector<std::size_t> finished;
  while (!active.empty() || !pending.empty()) {
    // Next event: a flow finishing its bytes, or a pending flow starting to move them.
    double t_finish = kInf;
    for (std::size_t k = 0; k < active.size(); ++k)
      t_finish = std::min(t_finish, rate[k] == kInf ? now : now + remaining[active[k]] / rate[k]);
    const double t_start = pending.empty() ? kInf : pending.top().first;
    const double t = std::min(t_finish, t_start);
    for (std::size_t k = 0; k < active.size(); ++k)
      remaining[active[k]] -= rate[k] == kInf ? remaining[active[k]] : rate[k] * (t - now);
    now = t;
    finished.clear();
    // One pass keeping the unfinished in order (erasing each finished flow in place cost
    // O(flows) apiece: an all-to-all over 1024 ranks finishes a million at once).
    std::size_t kept = 0;
    for (std::size_t k = 0; k < active.size(); ++k) {
      const std::size_t i = active[k];
      // Relative tolerance: bytes left from rounding count as done, as do bytes whose time
      // no longer moves the clock (late in a long run a few attoseconds vanish in `now`,
      // and the flow would never finish).
      if (remaining[i] <= flows[i].bytes * 1e-12 ||
          (rate[k] != kInf && (remaining[i] / rate[k] <= 1e-18 || now + remaining[i] / rate[k] <= now))) {
        done[i] = now;
        finished.push_back(i);
      } else {
        active[kept] = i;
        rate[kept] = rate[k];
        ++kept;
      }
    }
    active.resize(kept);
    rate.resize(kept);
    while (!pending.empty() && pending.top().first <= now) {
      const std::size_t i = pending.top().second;
      pending.pop();
      if (flows[i].bytes <= 0 || flows[i].path.empty()) {
        done[i] = now;
        finished.push_back(i);
      } else {
        active.push_back(i);
      }
    }
    std::sort(finished.begin(), finished.end());
    if (on_complete)
      for (std::size_t i : finished) on_complete(i, now, add);
    // New flows released at `now` with no latency start at once.
    while (!pending.empty() && pending.top().first <= now) {
      const std::size_t i = pending.top().second;
      pending.pop();
      if (flows[i].bytes <= 0 || flows[i].path.empty()) {
        done[i] = now;
        if (on_complete) on_complete(i, now, add);
      } else {
        active.push_back(i);
      }
    }
    recompute();
  }
  return done;
}

}  // namespace cardsim::fabric
