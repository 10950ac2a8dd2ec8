// Ring: each rank sends to its successor. all_reduce takes 2(n-1) steps of S/n (reduce-
// scatter then all-gather), all_gather and reduce_scatter n-1 steps of S/n, each step's
// piece in chunks through the ring's pipeline (pipelineRing: s steps of q chunks take
// s q + s - 1 chunk phases, the route's latency paid on the first s); broadcast and
// reduce run a pipelined chain from the root (n-2+m phases of S/m for m chunks, the route's
// latency paid on the chain's n-1 hops only). With
// several channels, each ring takes its share of the data over a different stride, so a
// full mesh spreads them over different links (past the strides coprime with n, over rings
// of other link-disjoint orders: every port of a full mesh but one for even n). Rings over several nodes visit each node's
// ranks in one run and leave every node through a different device (its NIC) per channel,
// one channel at least per device of a node, as libraries build their rings rail by rail:
// every NIC then carries a channel's share.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "device_models/fabric/Algorithms.h"

namespace cardsim::fabric {
namespace {

class Ring final : public ICollectiveAlgorithm {
 public:
  const char* name() const override { return "ring"; }
  std::string unsupported(const CollectiveRequest& r, const Topology&) const override {
    if (r.op == CollectiveOp::AllToAll) return "ring does not do all_to_all (use direct)";
    return {};
  }
  Schedule schedule(const CollectiveRequest& r, const Topology& t) const override {
    const uint32_t n = static_cast<uint32_t>(r.ranks.size());
    Schedule s;
    if (n < 2) return s;
    if (r.op == CollectiveOp::SendRecv) {
      s.phases.push_back(Phase{{Transfer{r.ranks[r.root], r.ranks[r.peer], r.bytes}}, 1});
      return s;
    }
    std::vector<std::vector<uint32_t>> orders = multiNodeOrders(r, t);
    if (orders.empty()) orders = ringOrders(r.ranks, r.channels, t);
    const double k = static_cast<double>(orders.size());
    Phase p;
    if (r.op == CollectiveOp::Broadcast || r.op == CollectiveOp::Reduce) {
      const uint32_t m = chunkCount(r.bytes / k, r.chunk_bytes);
      for (const std::vector<uint32_t>& o : orders) {
        const uint32_t from = static_cast<uint32_t>(std::find(o.begin(), o.end(), r.root) - o.begin());
        for (uint32_t i = 0; i + 1 < n; ++i) {
          // the chain from the root along the ring (reversed for reduce)
          const uint32_t a = o[(from + i) % n], b = o[(from + i + 1) % n];
          if (r.op == CollectiveOp::Broadcast) p.transfers.push_back({r.ranks[a], r.ranks[b], r.bytes / (k * m)});
          else p.transfers.push_back({r.ranks[b], r.ranks[a], r.bytes / (k * m)});
        }
      }
      p.repeat = n - 2 + m;
      p.pipeline_depth = n - 1;
      p.fill = n - 2;
      s.phases.push_back(std::move(p));
      return s;
    }
    const double bytes = r.op == CollectiveOp::Barrier ? 4.0 : r.bytes;
    std::vector<uint32_t> next(n);
    for (const std::vector<uint32_t>& o : orders) {
      for (uint32_t j = 0; j < n; ++j) next[o[j]] = o[(j + 1) % n];
      for (uint32_t i = 0; i < n; ++i) p.transfers.push_back({r.ranks[i], r.ranks[next[i]], bytes / (n * k)});
    }
    const bool two_passes = r.op == CollectiveOp::AllReduce || r.op == CollectiveOp::Barrier;
    pipelineRing(p, (two_passes ? 2 : 1) * (n - 1), r.chunk_bytes, t, n);
    s.phases.push_back(std::move(p));
    return s;
  }

 private:
  // Ranks over several nodes: each channel's ring order (rank indices), node after node in
  // the order the ranks first reach them. Channel c enters a node of L ranks at local index
  // c + s, walks stride s (coprime with L: other links on a full mesh; the strides of the
  // node's own channels, in turn) and leaves from local index c, so the channels leave
  // through different devices' NICs. Empty: one node.
  static std::vector<std::vector<uint32_t>> multiNodeOrders(const CollectiveRequest& r, const Topology& t) {
    std::vector<uint32_t> node_order;
    std::map<uint32_t, std::vector<uint32_t>> by_node;
    for (uint32_t i = 0; i < r.ranks.size(); ++i) {
      const uint32_t g = t.node(r.ranks[i]).group;
      if (by_node.find(g) == by_node.end()) node_order.push_back(g);
      by_node[g].push_back(i);
    }
    if (node_order.size() < 2) return {};
    uint32_t widest = 1;
    for (const auto& [g, local] : by_node) widest = std::max<uint32_t>(widest, static_cast<uint32_t>(local.size()));
    const uint32_t channels = std::max(std::max(1u, r.channels), widest);
    std::vector<std::vector<uint32_t>> orders(channels);
    for (uint32_t c = 0; c < channels; ++c)
      for (uint32_t g : node_order) {
        const std::vector<uint32_t>& local = by_node[g];
        const uint32_t l = static_cast<uint32_t>(local.size());
        // The node's rings use the strides its own channels would (the extra channels that
        // reach every NIC repeat them), so a node's links carry what they do in one node.
        const std::vector<uint32_t> strides = ringStrides(l, r.channels);
        const uint32_t stride = strides[c % strides.size()] % l;   // l == 1: 0
        const uint32_t exit = c % l;
        for (uint32_t j = 1; j <= l; ++j) orders[c].push_back(local[(exit + j * stride) % l]);
      }
    return orders;
  }
};

// Walecki's construction: members 0..n-2 on a circle and member n-1 off it; each ring leaves
// member n-1 for circle member i and zigzags i, i+1, i-1, i+2, ... around the circle back to
// it. Taken both ways, each ring kept if none of its hops (each a direct link) is taken.
std::vector<std::vector<uint32_t>> disjointRings(const std::vector<NodeId>& members, uint32_t channels,
                                                 const Topology& t) {
  const uint32_t n = static_cast<uint32_t>(members.size()), c = n - 1;
  std::vector<std::vector<uint32_t>> rings;
  if (n < 3) return rings;
  std::set<std::pair<uint32_t, uint32_t>> taken;
  for (uint32_t i = 0; i < c && rings.size() < channels; ++i) {
    std::vector<uint32_t> ring{n - 1};
    for (uint32_t d = 0; d < c; ++d) {
      const uint32_t k = (d + 1) / 2 % c;
      ring.push_back(d % 2 == 1 ? (i + k) % c : (i + c - k) % c);
    }
    for (bool reversed : {false, true}) {
      if (rings.size() >= channels) break;
      std::vector<uint32_t> o = ring;
      if (reversed) std::reverse(o.begin() + 1, o.end());   // the other way round, from member n-1
      bool free = true;
      for (uint32_t j = 0; j < n && free; ++j) {
        const uint32_t a = o[j], b = o[(j + 1) % n];
        free = !taken.count({a, b}) && t.route(members[a], members[b]).size() == 1;
      }
      if (!free) continue;
      for (uint32_t j = 0; j < n; ++j) taken.insert({o[j], o[(j + 1) % n]});
      rings.push_back(std::move(o));
    }
  }
  return rings;
}

}  // namespace

std::vector<std::vector<uint32_t>> ringOrders(const std::vector<NodeId>& members, uint32_t channels,
                                              const Topology& t) {
  const uint32_t n = static_cast<uint32_t>(members.size());
  const std::vector<uint32_t> strides = ringStrides(n, channels);
  std::vector<std::vector<uint32_t>> orders;
  if (channels > strides.size()) orders = disjointRings(members, channels, t);
  if (orders.size() > strides.size()) return orders;
  orders.clear();
  for (uint32_t stride : strides) {
    orders.emplace_back(n);
    for (uint32_t j = 0; j < n; ++j) orders.back()[j] = static_cast<uint32_t>(uint64_t{j} * stride % n);
  }
  return orders;
}

std::vector<uint32_t> ringStrides(uint32_t n, uint32_t channels) {
  std::vector<uint32_t> out;
  for (uint32_t s = 1; s < n && out.size() < std::max(1u, channels); ++s)
    if (std::gcd(s, n) == 1) out.push_back(s);
  if (out.empty()) out.push_back(1);
  return out;
}

std::unique_ptr<ICollectiveAlgorithm> makeRing() { return std::make_unique<Ring>(); }

}  // namespace cardsim::fabric
