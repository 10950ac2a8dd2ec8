// The algorithm registry (a table keyed by name) and the default choice.
#include <set>
#include <stdexcept>

#include "device_models/fabric/Algorithms.h"

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
  static const auto all = [] {
    std::vector<std::unique_ptr<ICollectiveAlgorithm>> v;
    for (const Entry& e : kAlgorithms) v.push_back(e.make());
    return v;
  }();
  return all;
}

bool spansNodes(const CollectiveRequest& r, const Topology& t) {
  std::set<uint32_t> groups;
  for (NodeId d : r.ranks) groups.insert(t.node(d).group);
  return groups.size() > 1;
}

}  // namespace

std::vector<std::string> algorithmNames() {
  std::vector<std::string> out;
  for (const Entry& e : kAlgorithms) out.emplace_back(e.name);
  return out;
}

const ICollectiveAlgorithm& algorithm(const std::string& name) {
  for (const auto& a : instances())
    if (name == a->name()) return *a;
  std::string valid;
  for (const Entry& e : kAlgorithms) valid += std::string(valid.empty() ? "" : ", ") + e.name;
  throw std::invalid_argument("unknown collective algorithm '" + name + "' (valid: " + valid + ")");
}

bool fullyConnected(const std::vector<NodeId>& ranks, const Topology& t) {
  for (NodeId a : ranks)
    for (NodeId b : ranks)
      if (a != b && t.route(a, b).size() != 1) return false;
  return true;
}

const ICollectiveAlgorithm& chooseAlgorithm(const CollectiveRequest& r, const Topology& t,
                                            const SelectionRule& rule) {
  const double bytes = r.op == CollectiveOp::Barrier ? 4.0 : r.bytes;
  switch (r.op) {
    case CollectiveOp::SendRecv:
    case CollectiveOp::AllToAll: return algorithm("direct");
    case CollectiveOp::AllReduce:
    case CollectiveOp::Barrier:
      if (spansNodes(r, t) && algorithm("hierarchical").unsupported(r, t).empty()) return algorithm("hierarchical");
      if (bytes >= rule.switch_min_bytes && algorithm("switch").unsupported(r, t).empty()) return algorithm("switch");
      return bytes < rule.tree_max_bytes ? algorithm("tree") : algorithm("ring");
    case CollectiveOp::AllGather:
    case CollectiveOp::ReduceScatter:
      return !spansNodes(r, t) && fullyConnected(r.ranks, t) ? algorithm("direct") : algorithm("ring");
    case CollectiveOp::Broadcast:
    case CollectiveOp::Reduce: return bytes < rule.tree_max_bytes ? algorithm("tree") : algorithm("ring");
  }
  return algorithm("ring");
}

const ICollectiveAlgorithm& pickAlgorithm(const std::string& forced, const CollectiveRequest& r,
                                          const Topology& t, const SelectionRule& rule) {
  if (forced.empty()) return chooseAlgorithm(r, t, rule);
  const ICollectiveAlgorithm& a = algorithm(forced);
  if (std::string why = a.unsupported(r, t); !why.empty())
    throw std::invalid_argument("collective algorithm '" + forced + "' cannot run " + opName(r.op) +
                                " on these ranks: " + why);
  return a;
}

}  // namespace cardsim::fabric
