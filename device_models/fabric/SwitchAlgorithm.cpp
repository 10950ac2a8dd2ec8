// In-switch reduction (NVLink SHARP style): every rank sends its buffer up to a switch that
// reduces, and the switch multicasts the sum back; reduction and multicast are pipelined,
// so up and down move at once: one phase of S up and S down per rank. The switch's
// reduction efficiency scales the bytes on the wire: multimem loads and stores carry less
// payload per link byte than the bulk writes the link's own efficiency describes. Only
// all_reduce, and only when every rank's links lead to the same reducing switch.
#include "device_models/fabric/Algorithms.h"

namespace cardsim::fabric {
namespace {

class InSwitch final : public ICollectiveAlgorithm {
 public:
  const char* name() const override { return "switch"; }
  std::string unsupported(const CollectiveRequest& r, const Topology& t) const override {
    if (r.op != CollectiveOp::AllReduce && r.op != CollectiveOp::Barrier)
      return std::string("switch does only all_reduce, not ") + opName(r.op);
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
    if (r.ranks.size() < 2) return s;
    NodeId sw{};
    t.singleSwitchOf(r.ranks[0], &sw);
    const double bytes = (r.op == CollectiveOp::Barrier ? 4.0 : r.bytes) / t.node(sw).reduction_efficiency;
    Phase p;
    for (NodeId d : r.ranks) {
      p.transfers.push_back({d, sw, bytes});
      p.transfers.push_back({sw, d, bytes});
    }
    s.phases.push_back(std::move(p));
    return s;
  }
};

}  // namespace

std::unique_ptr<ICollectiveAlgorithm> makeSwitch() { return std::make_unique<InSwitch>(); }

}  // namespace cardsim::fabric
