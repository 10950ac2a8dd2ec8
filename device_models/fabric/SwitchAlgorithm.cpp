// In-switch reduction (NVLink SHARP style). Without a round size (switch_chunk unset) it
// is the textbook in-network reduction: every rank streams S up, the switch reduces as the
// bytes pass and streams the sum back, S down. With one, it is NCCL's NVLS on one node: for each
// rank's slice of the buffer the switch pulls that slice from every rank and reduces it
// (multimem load-reduce), and the slice's owner stores the sum back through the switch,
// which multicasts it to every rank (multimem store). Per rank that is S + S/n up and S/n
// + S down. It goes in rounds of channels x ranks x chunk of the buffer (NCCL's loop), the
// multicast of one round overlapping the load-reduce of the next: the first round's
// reduction (up S_r, down S_r/n) and the last round's multicast (down S_r) have no partner,
// which costs (n-1)/(n+1) of a round's time beyond the rounds themselves, nearly a whole
// round's time (2 / (1 + 1/n)) for a buffer that is one round or less. The switch's
// reduction efficiency scales the bytes on the wire: multimem loads and stores carry less
// payload per link byte than the bulk writes the link's own efficiency describes. Only
// all_reduce, and only when every rank's links lead to the same reducing switch.
#include <algorithm>

#include "device_models/fabric/Algorithms.h"

namespace cardsim::fabric {
namespace {

class InSwitch final : public ICollectiveAlgorithm {
 public:
  const char* name() const override { return "switch"; }
  std::string unsupported(const CollectiveRequest& r, const Topology& t) const override {
    if (r.op != CollectiveOp::AllReduce && r.op != CollectiveOp::Barrier)
      return std::string("switch does only all_reduce (and barrier), not ") + opName(r.op);
    NodeId sw{}, first{};
    for (size_t i = 0; i < r.ranks.size(); ++i) {
      if (!t.singleSwitchOf(r.ranks[i], &sw) || !t.node(sw).reduces)
        return "switch needs every rank on one switch that reduces (" + t.node(r.ranks[i]).name + " is not)";
      if (i == 0) first = sw;
      if (sw != first) return "switch needs every rank on the same switch";
    }
    return {};
  }
  Schedule schedule(const CollectiveRequest& r, const Topology& t) const override {
    Schedule s;
    const std::size_t n = r.ranks.size();
    if (n < 2) return s;
    NodeId sw{};
    t.singleSwitchOf(r.ranks[0], &sw);
    const double bytes = r.op == CollectiveOp::Barrier ? 4.0 : r.bytes;
    const double round = r.switch_chunk_bytes * std::max<uint32_t>(1, r.switch_channels) * static_cast<double>(n);
    const uint32_t rounds = chunkCount(bytes, round);
    const double per_rank = round > 0 ? bytes / rounds * (1.0 + 1.0 / static_cast<double>(n)) : bytes;
    const double wire = per_rank / t.node(sw).reduction_efficiency;
    Phase p;
    for (NodeId d : r.ranks) {
      p.transfers.push_back({d, sw, wire});
      p.transfers.push_back({sw, d, wire});
    }
    p.repeat = rounds;
    p.pipeline_depth = 1;   // the rounds stream: only the first waits out the route
    if (round > 0) p.fill_repeats = static_cast<double>(n - 1) / static_cast<double>(n + 1);
    s.phases.push_back(std::move(p));
    return s;
  }
};

}  // namespace

std::unique_ptr<ICollectiveAlgorithm> makeSwitch() { return std::make_unique<InSwitch>(); }

}  // namespace cardsim::fabric
