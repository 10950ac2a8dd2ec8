// Direct: every rank sends each peer its share at once, in one phase per pass: all_to_all
// and all_gather one phase (S/n to each peer), reduce_scatter one phase (each rank's S/n
// piece to its owner), all_reduce both (2 phases), broadcast/reduce the whole buffer between
// the root and every other rank, send/recv one transfer. On a full mesh every transfer has
// its own link, so one phase costs one latency plus S/n over one link. An all_to_all with
// uneven splits sends each pair its own size (CollectiveRequest::pair_bytes), all at once.
#include "device_models/fabric/Algorithms.h"

#include <string>

namespace cardsim::fabric {
namespace {

class Direct final : public ICollectiveAlgorithm {
 public:
  const char* name() const override { return "direct"; }
  // Its phases hold a transfer per ordered pair of ranks, timed together: past 4096 ranks
  // (16.8 million transfers, several GB to solve) a clear refusal rather than running out of
  // memory.
  static constexpr size_t kMaxRanks = 4096;
  std::string unsupported(const CollectiveRequest& r, const Topology&) const override {
    const bool pairs = r.op != CollectiveOp::SendRecv && r.op != CollectiveOp::Broadcast && r.op != CollectiveOp::Reduce;
    if (pairs && r.ranks.size() > kMaxRanks)
      return "direct times every pair of ranks at once: " + std::string(opName(r.op)) + " over " +
             std::to_string(r.ranks.size()) + " ranks is over its limit of " + std::to_string(kMaxRanks) +
             " ranks (" + std::to_string(kMaxRanks * (kMaxRanks - 1)) + " transfers)";
    return {};
  }
  Schedule schedule(const CollectiveRequest& r, const Topology&) const override {
    const uint32_t n = static_cast<uint32_t>(r.ranks.size());
    Schedule s;
    if (n < 2) return s;
    auto allPairs = [&](double bytes) {
      Phase p;
      for (uint32_t a = 0; a < n; ++a)
        for (uint32_t b = 0; b < n; ++b)
          if (a != b) p.transfers.push_back({r.ranks[a], r.ranks[b], bytes});
      return p;
    };
    auto rooted = [&](bool to_root) {
      Phase p;
      for (uint32_t b = 0; b < n; ++b)
        if (b != r.root)
          p.transfers.push_back(to_root ? Transfer{r.ranks[b], r.ranks[r.root], r.bytes}
                                        : Transfer{r.ranks[r.root], r.ranks[b], r.bytes});
      return p;
    };
    switch (r.op) {
      case CollectiveOp::SendRecv: s.phases.push_back(Phase{{Transfer{r.ranks[r.root], r.ranks[r.peer], r.bytes}}, 1}); break;
      case CollectiveOp::AllToAll:
        if (!r.pair_bytes.empty()) {
          Phase p;
          for (uint32_t a = 0; a < n; ++a)
            for (uint32_t b = 0; b < n; ++b)
              if (a != b && r.pair_bytes[size_t{a} * n + b] > 0)
                p.transfers.push_back({r.ranks[a], r.ranks[b], r.pair_bytes[size_t{a} * n + b]});
          s.phases.push_back(std::move(p));
          break;
        }
        [[fallthrough]];
      case CollectiveOp::AllGather:
      case CollectiveOp::ReduceScatter: s.phases.push_back(allPairs(r.bytes / n)); break;
      case CollectiveOp::AllReduce:
        s.phases.push_back(allPairs(r.bytes / n));
        s.phases.push_back(allPairs(r.bytes / n));
        break;
      case CollectiveOp::Barrier:
        s.phases.push_back(allPairs(4.0 / n));
        s.phases.push_back(allPairs(4.0 / n));
        break;
      case CollectiveOp::Broadcast: s.phases.push_back(rooted(false)); break;
      case CollectiveOp::Reduce: s.phases.push_back(rooted(true)); break;
    }
    return s;
  }
};

}  // namespace

std::unique_ptr<ICollectiveAlgorithm> makeDirect() { return std::make_unique<Direct>(); }

}  // namespace cardsim::fabric
