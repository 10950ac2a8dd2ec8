// The algorithm registry (a table keyed by name) and the default choice.
#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "device_models/fabric/Algorithms.h"
#include "device_models/fabric/CollectiveEngine.h"

namespace cardsim::fabric {
namespace {

struct Entry {
  const char* name;
  std::unique_ptr<ICollectiveAlgorithm> (*make)();
};
constexpr Entry kAlgorithms[] = {
    {"ring", &makeRing},       {"tree", &makeTree},     {"direct", &makeDirect},
    {"hierarchical", &makeHierarchical}, {"switch", &makeSwitch},
};

const std::vector<std::unique_ptr<ICollectiveAlgorithm>>& instances() {
  // Never destroyed: a fabric server times collectives on its own thread while the process
  // hosting it exits (it serves the other ranks until they are done), after static
  // destructors have begun to run.
  static const auto* all = [] {
    auto* v = new std::vector<std::unique_ptr<ICollectiveAlgorithm>>;
    for (const Entry& e : kAlgorithms) v->push_back(e.make());
    return v;
  }();
  return *all;
}

}  // namespace

std::vector<std::string> algorithmNames() {
  std::vector<std::string> out;
  for (const Entry& e : kAlgorithms) out.emplace_back(e.name);
  return out;
}

const ICollectiveAlgorithm& algorithm(const std::string& name) {
  // Names are taken in any case ("Ring", CARDSIM_COLL_ALGO=TREE), as collective ops are.
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& a : instances())
    if (lower == a->name()) return *a;
  std::string valid;
  for (const Entry& e : kAlgorithms) valid += std::string(valid.empty() ? "" : ", ") + e.name;
  throw std::invalid_argument("unknown collective algorithm '" + name + "' (valid: " + valid + ")");
}

// All-pairs schedules grow as n^2: past this many transfers in a phase the tuner leaves them
// out (a schedule that size costs as much to lay out).
constexpr size_t kMaxTunedFlows = 65536;

// Whether the tuner weighs `a` for `r`. All-pairs (direct) collectives are what vendor
// libraries use inside one node, over its NVSwitch-like plane or full mesh; across nodes
// they run rings, trees and hierarchies, their NICs taking no n^2 messages per collective.
// all_to_all, which only direct does, is laid out all-pairs whatever the scale.
bool tunerWeighs(const ICollectiveAlgorithm& a, const CollectiveRequest& r, const Topology& t) {
  if (std::string(a.name()) != "direct" || r.op == CollectiveOp::AllToAll) return true;
  const size_t n = r.ranks.size();
  return n * (n - 1) <= kMaxTunedFlows && withinOneNode(r.ranks, t);
}

bool withinOneNode(const std::vector<NodeId>& ranks, const Topology& t) {
  for (NodeId d : ranks)
    if (t.node(d).group != t.node(ranks.front()).group) return false;
  return true;
}

bool fullyConnected(const std::vector<NodeId>& ranks, const Topology& t) {
  for (NodeId a : ranks)
    for (NodeId b : ranks)
      if (a != b && t.route(a, b).size() != 1) return false;
  return true;
}

// Whether the library has `a` for `r`: listed by name, or as "name:across_nodes" for groups
// spanning nodes only (NCCL's trees join nodes; inside a node it runs chains and rings).
static bool inLibrary(const ICollectiveAlgorithm& a, const CollectiveRequest& r, const Topology& t) {
  if (r.library.empty()) return true;
  for (const std::string& entry : r.library) {
    const std::size_t colon = entry.find(':');
    if (entry.compare(0, colon, a.name()) != 0) continue;
    if (colon == std::string::npos || !withinOneNode(r.ranks, t)) return true;
  }
  return false;
}

const ICollectiveAlgorithm& chooseAlgorithm(const CollectiveRequest& r, const Topology& t) {
  const CollectiveEngine engine(t);
  const ICollectiveAlgorithm* best = nullptr;
  double best_s = 0;
  // The library's own algorithms; one it has none of for this collective (all_to_all,
  // send/recv: point to point in every library) is timed by whichever does it.
  bool library_runs = false;
  for (const auto& a : instances())
    library_runs = library_runs || (inLibrary(*a, r, t) && a->unsupported(r, t).empty() && tunerWeighs(*a, r, t));
  for (const auto& a : instances()) {
    if (!a->unsupported(r, t).empty() || !tunerWeighs(*a, r, t)) continue;
    if (library_runs && !inLibrary(*a, r, t)) continue;
    const Schedule sched = a->schedule(r, t);
    size_t flows = 0;
    for (const Phase& p : sched.phases) flows = std::max(flows, p.transfers.size());
    if (flows > kMaxTunedFlows) continue;
    const double s = engine.timeAlone(sched);
    if (!best || s < best_s * (1 - 1e-12)) best = a.get(), best_s = s;
  }
  if (best) return *best;
  // None the tuner weighs runs it (too many flows to time): direct, unless it cannot either.
  const ICollectiveAlgorithm& direct = algorithm("direct");
  if (std::string why = direct.unsupported(r, t); !why.empty())
    throw std::invalid_argument(std::string("no collective algorithm can run ") + opName(r.op) + " on these " +
                                std::to_string(r.ranks.size()) + " ranks: " + why);
  return direct;
}

const ICollectiveAlgorithm& pickAlgorithm(const std::string& forced, const CollectiveRequest& r,
                                          const Topology& t) {
  if (forced.empty()) return chooseAlgorithm(r, t);
  const ICollectiveAlgorithm& a = algorithm(forced);
  if (std::string why = a.unsupported(r, t); !why.empty()) {
    std::string can;   // what the user may force instead
    for (const auto& other : instances())
      if (other->unsupported(r, t).empty()) can += (can.empty() ? "" : ", ") + std::string(other->name());
    throw std::invalid_argument("collective algorithm '" + forced + "' cannot run " + opName(r.op) +
                                " on these ranks: " + why + " (algorithms that can: " +
                                (can.empty() ? std::string("none") : can) + ")");
  }
  return a;
}

const ICollectiveAlgorithm* preferredIfRunnable(const std::string& preferred, const CollectiveRequest& r,
                                                const Topology& t) {
  if (preferred.empty()) return nullptr;
  const ICollectiveAlgorithm& a = algorithm(preferred);   // an unknown name is still an error
  return a.unsupported(r, t).empty() ? &a : nullptr;
}

const ICollectiveAlgorithm& preferAlgorithm(const std::string& preferred, const CollectiveRequest& r,
                                            const Topology& t) {
  const ICollectiveAlgorithm* a = preferredIfRunnable(preferred, r, t);
  return a ? *a : chooseAlgorithm(r, t);
}

}  // namespace cardsim::fabric
