// Hierarchical all_reduce for ranks spread over nodes: a ring reduce-scatter inside every
// node (L-1 steps of S/L, split over the channels' rings as the flat ring splits its data),
// a ring all-reduce across nodes among the ranks with the same local index (2(N-1) steps of
// S/(L N)), and a ring all-gather inside every node (L-1 steps of S/L), each ring's pieces
// in chunks through its pipeline as the flat ring's (pipelineRing). The slow links between
// nodes then carry 1/L of what a flat ring sends over them.
#include <map>

#include "device_models/fabric/Algorithms.h"

namespace cardsim::fabric {
namespace {

class Hierarchical final : public ICollectiveAlgorithm {
 public:
  const char* name() const override { return "hierarchical"; }
  std::string unsupported(const CollectiveRequest& r, const Topology& t) const override {
    if (r.op != CollectiveOp::AllReduce && r.op != CollectiveOp::Barrier)
      return std::string("hierarchical does only all_reduce (and barrier), not ") + opName(r.op);
    const auto groups = byNode(r, t);
    size_t per = 0;
    for (const auto& [node, ranks] : groups) {
      if (per == 0) per = ranks.size();
      if (ranks.size() != per) return "hierarchical needs the same number of ranks on every node";
    }
    return {};
  }
  Schedule schedule(const CollectiveRequest& r, const Topology& t) const override {
    Schedule s;
    if (r.ranks.size() < 2) return s;
    const auto groups = byNode(r, t);
    const double bytes = r.op == CollectiveOp::Barrier ? 4.0 : r.bytes;
    const uint32_t nodes = static_cast<uint32_t>(groups.size());
    const uint32_t local = static_cast<uint32_t>(groups.begin()->second.size());
    // Inside a node the rings run on every channel, as the flat ring does (other links on a
    // full mesh: ringOrders).
    Phase intra;
    for (const auto& [node, ranks] : groups) {
      const std::vector<std::vector<uint32_t>> orders = ringOrders(ranks, r.channels, t);
      const double k = static_cast<double>(orders.size());
      std::vector<uint32_t> next(local);
      for (const std::vector<uint32_t>& o : orders) {
        for (uint32_t j = 0; j < local; ++j) next[o[j]] = o[(j + 1) % local];
        for (uint32_t i = 0; i < local && local > 1; ++i)
          intra.transfers.push_back({ranks[i], ranks[next[i]], bytes / (local * k)});
      }
    }
    if (nodes == 1) {   // one node: its ring, both passes through one pipeline
      pipelineRing(intra, 2 * (local - 1), r.chunk_bytes, t, local);
      s.phases.push_back(std::move(intra));
      return s;
    }
    pipelineRing(intra, local - 1, r.chunk_bytes, t, local);
    Phase inter;
    std::vector<const std::vector<NodeId>*> order;
    for (const auto& [node, ranks] : groups) order.push_back(&ranks);
    for (uint32_t i = 0; i < local && nodes > 1; ++i)
      for (uint32_t k = 0; k < nodes; ++k)
        inter.transfers.push_back({(*order[k])[i], (*order[(k + 1) % nodes])[i], bytes / (local * nodes)});
    pipelineRing(inter, 2 * (nodes - 1), r.chunk_bytes, t, nodes);
    if (local > 1) s.phases.push_back(intra);
    if (nodes > 1) s.phases.push_back(inter);
    if (local > 1) s.phases.push_back(intra);
    return s;
  }

 private:
  static std::map<uint32_t, std::vector<NodeId>> byNode(const CollectiveRequest& r, const Topology& t) {
    std::map<uint32_t, std::vector<NodeId>> g;
    for (NodeId d : r.ranks) g[t.node(d).group].push_back(d);
    return g;
  }
};

}  // namespace

std::unique_ptr<ICollectiveAlgorithm> makeHierarchical() { return std::make_unique<Hierarchical>(); }

}  // namespace cardsim::fabric
