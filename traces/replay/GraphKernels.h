// The kernels a launched graph ran, found from their capture: a graph's kernel commands are
// tied to its launch call (or, on the streams it forked to inside, to no call), not to
// the kernel launches that describe them (cost descriptor, shape), which the capture
// recorded. RankAnalysis reads those for the roofline (is a kernel memory-bound).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "traces/lib/CapturedByGraph.h"
#include "traces/proto/trace.pb.h"

namespace cardsim::replay {

// `Shape`: what the caller keeps of a kernel launch. Fed the rank's records in file order.
template <typename Shape>
class GraphKernels {
 public:
  // A kernel launch (status 0) on `stream`: kept if a capture is open (on its stream, or the
  // latest capture's, for a stream the capture forked to).
  void kernel(uint32_t stream, uint32_t name, const Shape& shape) { captured_.add(stream, Kernel{name, shape}); }

  // A graph call (status 0).
  void graph(const trace::Envelope& e) {
    const trace::GraphOp& g = e.graph();
    captured_.graphOp(g);
    if (g.op() == trace::GraphOp::LAUNCH) {
      by_call_[e.call()] = launches_.size();
      launches_.push_back(Launch{e.call(), e.host_begin_ps(), e.host_end_ps(), g.graph()});
    }
  }

  // The captured kernel a graph's kernel command ran (`call`: the command's call, 0 for
  // none; `ready_ps`: when its launch handed it over): the n-th command of a name in a
  // launch is the n-th captured kernel of that name. Null if it is no graph's.
  const Shape* find(uint64_t call, uint32_t name, uint64_t ready_ps) {
    const Launch* l = call != 0 ? launchOfCall(call) : launchHolding(ready_ps);
    if (!l) return nullptr;
    const std::vector<Kernel>* g = captured_.graph(l->graph);
    if (!g) return nullptr;
    uint32_t& seen = seen_[{l->call, name}];
    uint32_t k = 0;
    for (const Kernel& c : *g)
      if (c.name == name && k++ == seen) {
        ++seen;
        return &c.shape;
      }
    // More commands of the name than captured kernels (a graph recaptured under its id):
    // the first of the name stands for the rest.
    for (const Kernel& c : *g)
      if (c.name == name) return &c.shape;
    return nullptr;
  }

 private:
  struct Kernel {
    uint32_t name;
    Shape shape;
  };
  struct Launch {
    uint64_t call, begin_ps, end_ps;
    uint32_t graph;
  };

  const Launch* launchOfCall(uint64_t call) const {
    auto it = by_call_.find(call);
    return it == by_call_.end() ? nullptr : &launches_[it->second];
  }
  // Commands on a graph's internal streams: the launch whose host span holds their hand-over
  // (launches are recorded in host order).
  const Launch* launchHolding(uint64_t ready_ps) const {
    auto it = std::lower_bound(launches_.begin(), launches_.end(), ready_ps,
                               [](const Launch& l, uint64_t t) { return l.begin_ps < t; });
    if (it == launches_.begin()) return nullptr;
    --it;
    return ready_ps <= it->end_ps ? &*it : nullptr;
  }

  trace::CapturedByGraph<Kernel> captured_;                   // graph -> kernels, capture order
  std::vector<Launch> launches_;
  std::unordered_map<uint64_t, std::size_t> by_call_;          // launch call -> launches_
  std::map<std::pair<uint64_t, uint32_t>, uint32_t> seen_;    // (launch call, name) -> commands
};

}  // namespace cardsim::replay
