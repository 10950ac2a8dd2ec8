// Double binary tree: two in-order binary trees over the ranks, the second the first's
// mirror image (rank i in the place of rank n-1-i: other links), each carrying half the data. all_reduce reduces up both trees and broadcasts down,
// pipelined in chunks: in steady state every tree edge moves a chunk each phase, in both
// directions, for 2*depth + m - 1 phases; broadcast and reduce use one direction (depth +
// m - 1 phases). Only the pipeline's hops wait out the links' latency (Phase): latency
// grows with log2(n) instead of n. Within one node each channel runs its pair of trees over
// the ranks in another order (the ring's strides: other links on a full mesh), each with
// its share of the data; across nodes one pair (channels there would multiply the
// transfers of a thousand-rank tree for links the trees' edges mostly share anyway).
#include <functional>

#include "device_models/fabric/Algorithms.h"

namespace cardsim::fabric {
namespace {

// (parent, child) edges of an in-order binary tree over positions lo..hi; returns the root.
int build(int lo, int hi, std::vector<std::pair<int, int>>* edges) {
  if (lo > hi) return -1;
  const int mid = (lo + hi) / 2;
  for (int c : {build(lo, mid - 1, edges), build(mid + 1, hi, edges)})
    if (c >= 0) edges->push_back({mid, c});
  return mid;
}

int depthOf(int n) {
  int d = 0;
  while ((1 << (d + 1)) - 1 < n) ++d;
  return d;
}

class Tree final : public ICollectiveAlgorithm {
 public:
  const char* name() const override { return "tree"; }
  std::string unsupported(const CollectiveRequest& r, const Topology&) const override {
    switch (r.op) {
      case CollectiveOp::AllReduce:
      case CollectiveOp::Broadcast:
      case CollectiveOp::Reduce:
      case CollectiveOp::Barrier: return {};
      default: return std::string("tree does not do ") + opName(r.op) + " (it does all_reduce, broadcast, reduce, barrier)";
    }
  }
  Schedule schedule(const CollectiveRequest& r, const Topology& t) const override {
    const int n = static_cast<int>(r.ranks.size());
    Schedule s;
    if (n < 2) return s;
    std::vector<std::pair<int, int>> edges;
    build(0, n - 1, &edges);
    const std::vector<uint32_t> strides = withinOneNode(r.ranks, t) ? ringStrides(static_cast<uint32_t>(n), r.channels)
                                                   : std::vector<uint32_t>{1};
    const double k = static_cast<double>(strides.size());
    const double bytes = r.op == CollectiveOp::Barrier ? 4.0 : r.bytes;
    const uint32_t m = chunkCount(bytes / 2 / k, r.chunk_bytes);
    const double piece = bytes / 2 / k / m;
    const bool rooted = r.op == CollectiveOp::Broadcast || r.op == CollectiveOp::Reduce;
    const bool up = r.op != CollectiveOp::Broadcast, down = r.op != CollectiveOp::Reduce;
    Phase p;
    for (uint32_t stride : strides)
      for (int mirrored : {0, 1}) {
        // The second tree is the first's mirror image (other links); a rooted collective
        // rotates each tree so that its root is r.root. Channel c's trees take position i
        // to rank i * stride (mod n).
        const int root_pos = mirrored ? n - 1 - (n - 1) / 2 : (n - 1) / 2;
        const int root_at = static_cast<int>((static_cast<uint64_t>(root_pos) * stride) % static_cast<uint64_t>(n));
        const int rot = rooted ? (static_cast<int>(r.root) - root_at + n) % n : 0;
        for (auto [parent, child] : edges) {
          const int a = mirrored ? n - 1 - parent : parent, b = mirrored ? n - 1 - child : child;
          const auto at = [&](int pos) {
            return r.ranks[(static_cast<uint64_t>(pos) * stride % static_cast<uint64_t>(n) + static_cast<uint64_t>(rot)) %
                           static_cast<uint64_t>(n)];
          };
          const NodeId pa = at(a), ch = at(b);
          if (up) p.transfers.push_back({ch, pa, piece});
          if (down) p.transfers.push_back({pa, ch, piece});
        }
      }
    const int d = depthOf(n);
    const int hops = up && down ? 2 * d : d;
    p.repeat = static_cast<uint32_t>(hops + static_cast<int>(m) - 1);
    p.pipeline_depth = static_cast<uint32_t>(hops);
    p.fill = static_cast<uint32_t>(hops - 1);
    s.phases.push_back(std::move(p));
    return s;
  }
};

}  // namespace

std::unique_ptr<ICollectiveAlgorithm> makeTree() { return std::make_unique<Tree>(); }

}  // namespace cardsim::fabric
