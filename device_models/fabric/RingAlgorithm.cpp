// Ring: each rank sends to its successor. all_reduce takes 2(n-1) steps of S/n (reduce-
// scatter then all-gather), all_gather and reduce_scatter n-1 steps of S/n; broadcast and
// reduce run a pipelined chain from the root (n-2+m phases of S/m for m chunks, the route's
// latency paid on the chain's n-1 hops only). With
// several channels, each ring takes its share of the data over a different stride, so a
// full mesh spreads them over different links.
#include <numeric>

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
  Schedule schedule(const CollectiveRequest& r, const Topology&) const override {
    const uint32_t n = static_cast<uint32_t>(r.ranks.size());
    Schedule s;
    if (n < 2) return s;
    if (r.op == CollectiveOp::SendRecv) {
      s.phases.push_back(Phase{{Transfer{r.ranks[r.root], r.ranks[r.peer], r.bytes}}, 1});
      return s;
    }
    const std::vector<uint32_t> strides = ringStrides(n, r.channels);
    const double k = static_cast<double>(strides.size());
    Phase p;
    if (r.op == CollectiveOp::Broadcast || r.op == CollectiveOp::Reduce) {
      const uint32_t m = chunkCount(r.bytes / k, r.chunk_bytes);
      for (uint32_t stride : strides)
        for (uint32_t i = 0; i + 1 < n; ++i) {
          // the chain root, root+stride, root+2*stride, ... (reversed for reduce)
          const uint32_t a = (r.root + i * stride) % n, b = (r.root + (i + 1) * stride) % n;
          if (r.op == CollectiveOp::Broadcast) p.transfers.push_back({r.ranks[a], r.ranks[b], r.bytes / (k * m)});
          else p.transfers.push_back({r.ranks[b], r.ranks[a], r.bytes / (k * m)});
        }
      p.repeat = n - 2 + m;
      p.pipeline_depth = n - 1;
      s.phases.push_back(std::move(p));
      return s;
    }
    const double bytes = r.op == CollectiveOp::Barrier ? 4.0 : r.bytes;
    for (uint32_t stride : strides)
      for (uint32_t i = 0; i < n; ++i)
        p.transfers.push_back({r.ranks[i], r.ranks[(i + stride) % n], bytes / (n * k)});
    const bool two_passes = r.op == CollectiveOp::AllReduce || r.op == CollectiveOp::Barrier;
    p.repeat = (two_passes ? 2 : 1) * (n - 1);
    s.phases.push_back(std::move(p));
    return s;
  }
};

}  // namespace

std::vector<uint32_t> ringStrides(uint32_t n, uint32_t channels) {
  std::vector<uint32_t> out;
  for (uint32_t s = 1; s < n && out.size() < std::max(1u, channels); ++s)
    if (std::gcd(s, n) == 1) out.push_back(s);
  if (out.empty()) out.push_back(1);
  return out;
}

std::unique_ptr<ICollectiveAlgorithm> makeRing() { return std::make_unique<Ring>(); }

}  // namespace cardsim::fabric
