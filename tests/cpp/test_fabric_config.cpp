// The presets' `fabric` blocks: loaded by shape, sourced, overridable, errors by key path.
#include <gtest/gtest.h>

#include <cmath>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>

#include <cstdlib>
#include <set>

#include "simulator/FabricConfig.h"
#include "simulator/FabricModel.h"
#include "simulator/proto/config.pb.h"

using namespace cardsim;
namespace pb = google::protobuf;

namespace {

// Every quantity present under `m`, with its key path.
void presentQuantities(const pb::Message& m, const std::string& prefix,
                       std::vector<std::pair<std::string, const config::Quantity*>>* out) {
  const pb::Reflection* r = m.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const pb::FieldDescriptor* f : fields) {
    if (f->type() != pb::FieldDescriptor::TYPE_MESSAGE || f->is_repeated()) continue;
    const pb::Message& sub = r->GetMessage(m, f);
    if (f->message_type() == config::Quantity::descriptor())
      out->push_back({prefix + f->name(), static_cast<const config::Quantity*>(&sub)});
    else
      presentQuantities(sub, prefix + f->name() + ".", out);
  }
}

std::string errorOf(const std::vector<std::string>& overrides, const std::string& preset = "br100") {
  sim::SimOptions o;
  o.preset = preset;
  o.overrides = overrides;
  try {
    sim::loadFabricParams(o);
  } catch (const sim::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(FabricConfig, EveryPresetDescribesItsFabricWithSources) {
  for (const std::string& name : sim::presetNames()) {
    SCOPED_TRACE(name);
    const config::Preset p = sim::loadPreset(name);
    ASSERT_TRUE(p.device().has_fabric());
    std::set<std::string> ids;
    for (const auto& s : p.sources()) ids.insert(s.id());
    std::vector<std::pair<std::string, const config::Quantity*>> qs;
    presentQuantities(p.device().fabric(), "fabric.", &qs);
    EXPECT_GE(qs.size(), 4u);
    for (const auto& [path, q] : qs) {
      EXPECT_NE(q->confidence(), config::CONFIDENCE_UNSET) << path;
      if (q->confidence() == config::PUBLISHED || q->confidence() == config::DERIVED) {
        EXPECT_TRUE(ids.count(q->source())) << path << " cites '" << q->source() << "', not in the preset's sources";
      }
      if (q->confidence() == config::ASSUMED) {
        EXPECT_FALSE(q->note().empty()) << path << ": say why it is assumed";
      }
    }
    sim::SimOptions o;
    o.preset = name;
    const fabric::FabricParams f = sim::loadFabricParams(o);
    EXPECT_EQ(f.devices_per_node, 8u);
    EXPECT_GT(f.link.bandwidth_bytes_per_s, 1e9);
    EXPECT_EQ(fabric::buildTopology(f).devices().size(), 8u);
  }
}

TEST(FabricConfig, PresetShapes) {
  sim::SimOptions o;
  o.preset = "br100";
  fabric::FabricParams f = sim::loadFabricParams(o);
  EXPECT_EQ(f.shape, fabric::NodeShape::FullMesh);
  EXPECT_DOUBLE_EQ(f.link.bandwidth_bytes_per_s, 32e9);
  o.preset = "h100-sxm";
  f = sim::loadFabricParams(o);
  EXPECT_EQ(f.shape, fabric::NodeShape::SwitchStar);
  EXPECT_DOUBLE_EQ(f.link.bandwidth_bytes_per_s, 450e9 * 0.8124);
  EXPECT_TRUE(f.in_switch_reduction);
  o.preset = "mlu370-x8";
  f = sim::loadFabricParams(o);
  EXPECT_EQ(f.shape, fabric::NodeShape::CardGroup);
  EXPECT_EQ(f.chips_per_card, 2u);
  EXPECT_EQ(f.chunk_bytes, 512.0 * 1024);
}

// The calibration references: NVLink numbers from the datasheets, one efficiency figure per
// link type, the one latency figure (see the presets' notes and benchmarks/collective_fidelity.py).
TEST(FabricConfig, ReferencePresetsCarryTheirCalibration) {
  sim::SimOptions o;
  o.preset = "a100-sxm";
  fabric::FabricParams f = sim::loadFabricParams(o);
  EXPECT_EQ(f.shape, fabric::NodeShape::SwitchStar);
  EXPECT_DOUBLE_EQ(f.link.bandwidth_bytes_per_s, 300e9 * 0.783);
  EXPECT_FALSE(f.in_switch_reduction);
  EXPECT_DOUBLE_EQ(f.collective_latency_s, 33.14e-6);
  EXPECT_DOUBLE_EQ(f.chunk_bytes, 2.0 * 1024 * 1024);   // NCCL's all-reduce chunk
  EXPECT_EQ(f.library_algorithms, (std::vector<std::string>{"ring", "tree:across_nodes", "switch"}));
  o.preset = "h200-sxm";
  f = sim::loadFabricParams(o);
  EXPECT_DOUBLE_EQ(f.link.bandwidth_bytes_per_s, 450e9 * 0.8124);
  EXPECT_TRUE(f.in_switch_reduction);
  EXPECT_DOUBLE_EQ(f.reduction_efficiency, 0.8319);
  EXPECT_DOUBLE_EQ(f.switch_chunk_bytes, 128.0 * 1024);   // NCCL's NVLS chunk and channels
  EXPECT_EQ(f.switch_channels, 16u);
  EXPECT_DOUBLE_EQ(f.collective_latency_s, 30.0e-6);
  EXPECT_DOUBLE_EQ(fabric::buildTopology(f).collectiveLatency(), 30.0e-6);
  // The H100 shares the H200's links, switch and GPU die: the same figures.
  o.preset = "h100-sxm";
  f = sim::loadFabricParams(o);
  EXPECT_DOUBLE_EQ(f.link.bandwidth_bytes_per_s, 450e9 * 0.8124);
  EXPECT_DOUBLE_EQ(f.reduction_efficiency, 0.8319);
  EXPECT_DOUBLE_EQ(f.collective_latency_s, 30.0e-6);
  // Presets without them: no fixed cost, full-rate reductions.
  o.preset = "br100";
  f = sim::loadFabricParams(o);
  EXPECT_EQ(f.collective_latency_s, 0.0);
  EXPECT_EQ(f.reduction_efficiency, 1.0);
  EXPECT_EQ(f.switch_chunk_bytes, 0.0);
  EXPECT_EQ(f.switch_channels, 1u);
  // Overridable by key path, checked at load.
  o.preset = "h200-sxm";
  o.overrides = {"fabric.reduction_efficiency=0.5", "fabric.collective_latency=1 us"};
  f = sim::loadFabricParams(o);
  EXPECT_DOUBLE_EQ(f.reduction_efficiency, 0.5);
  EXPECT_DOUBLE_EQ(f.collective_latency_s, 1e-6);
  // NVLS switched off (as NCCL_NVLS_ENABLE=0) keeps the figure but leaves it unused.
  o.overrides = {"fabric.in_switch_reduction=false"};
  EXPECT_NO_THROW(sim::loadFabricParams(o));
  EXPECT_NE(errorOf({"fabric.reduction_efficiency=1.5"}, "h200-sxm").find("device.fabric.reduction_efficiency"),
            std::string::npos);
  EXPECT_NE(errorOf({"fabric.switch_channels=0"}, "h200-sxm").find("device.fabric.switch_channels"), std::string::npos);
  EXPECT_NE(errorOf({"fabric.switch_chunk=-1 KiB"}, "h200-sxm").find("device.fabric.switch_chunk"), std::string::npos);
  EXPECT_NE(errorOf({"fabric.collective_latency=-1 us"}, "h200-sxm").find("device.fabric.collective_latency"),
            std::string::npos);
  EXPECT_NE(errorOf({"fabric.collective_latency=2 s"}, "h200-sxm").find("not below 1 s"), std::string::npos);
  EXPECT_NE(errorOf({"fabric.collective_latency=30"}, "h200-sxm").find("device.fabric.collective_latency"),
            std::string::npos);
}

TEST(FabricConfig, OverridesAndNodes) {
  sim::SimOptions o;
  o.preset = "br100";
  o.overrides = {"fabric.link.bandwidth=64 GB/s", "fabric.link.efficiency=0.5", "fabric.nodes=4"};
  fabric::FabricParams f = sim::loadFabricParams(o);
  EXPECT_DOUBLE_EQ(f.link.bandwidth_bytes_per_s, 32e9);   // 64 GB/s x 0.5 achieved
  EXPECT_EQ(f.nodes, 4u);
  EXPECT_EQ(fabric::buildTopology(f).devices().size(), 32u);
  setenv("CARDSIM_NODES", "3", 1);
  EXPECT_EQ(sim::loadFabricParams(o).nodes, 3u);
  setenv("CARDSIM_NODES", "three", 1);
  EXPECT_THROW(sim::loadFabricParams(o), sim::ConfigError);
  unsetenv("CARDSIM_NODES");
}

TEST(FabricConfig, ErrorsNameTheKeyPathAndValue) {
  EXPECT_NE(errorOf({"fabric.shape=torus"}).find("device.fabric.shape: unknown fabric shape 'torus' (valid: full_mesh, switch, card_group)"),
            std::string::npos);
  EXPECT_NE(errorOf({"fabric.link.bandwidth=fast"}).find("device.fabric.link.bandwidth"), std::string::npos);
  EXPECT_NE(errorOf({"fabric.link.bandwidth=-1 GB/s"}).find("device.fabric.link.bandwidth"), std::string::npos);
  // A card group needs what a mesh does not.
  const std::string card = errorOf({"fabric.shape=card_group"});
  EXPECT_NE(card.find("device.fabric.on_card: missing"), std::string::npos) << card;
  EXPECT_NE(card.find("device.fabric.chips_per_card: missing"), std::string::npos) << card;
  EXPECT_NE(errorOf({"fabric.in_switch_reduction=true"}).find("only a 'switch' shape"), std::string::npos);
  EXPECT_NE(errorOf({"fabric.in_switch_reduction=yes"}).find("wants true or false"), std::string::npos);
  EXPECT_NE(errorOf({"fabric.nosuch=1"}).find("nosuch"), std::string::npos);
  EXPECT_NE(errorOf({"fabric.oversubscription=0.5"}).find("device.fabric.oversubscription"), std::string::npos);
  EXPECT_EQ(errorOf({}), "");
  // As the device's errors do, a bad value names the --set it came from, once.
  const std::string neg = errorOf({"fabric.link.bandwidth=-1 GB/s"});
  EXPECT_NE(neg.find("+ overrides: invalid fabric"), std::string::npos) << neg;
  EXPECT_NE(neg.find("[override \"fabric.link.bandwidth=-1 GB/s\"]"), std::string::npos) << neg;
  const std::string channels = errorOf({"fabric.channels=-3"});
  EXPECT_EQ(channels.find("device.fabric.channels"), channels.rfind("device.fabric.channels")) << channels;
  const std::string oversub = errorOf({"fabric.oversubscription=-2"});
  EXPECT_EQ(oversub.find("device.fabric.oversubscription"), oversub.rfind("device.fabric.oversubscription")) << oversub;
}

fabric::FabricParams paramsOf(const std::string& preset, const std::vector<std::string>& overrides) {
  sim::SimOptions o;
  o.preset = preset;
  o.overrides = overrides;
  return sim::loadFabricParams(o);
}

TEST(FabricConfig, LanesTakePortsAndPortsCapTheirLanes) {
  // h200-sxm: 18 NVLinks of 25 GB/s each way into the switch plane, NCCL reaching 0.8124.
  const double eff = 0.8124;
  fabric::FabricParams p = paramsOf("h200-sxm", {});
  EXPECT_EQ(p.link_lanes, 18u);
  EXPECT_EQ(p.ports, 18u);
  EXPECT_EQ(p.switch_ports, 256u);
  EXPECT_DOUBLE_EQ(p.link.bandwidth_bytes_per_s, 450e9 * eff);
  // Ports slower than the lanes bound the link: 18 x 20 GB/s.
  EXPECT_DOUBLE_EQ(paramsOf("h200-sxm", {"fabric.port_bandwidth=20 GB/s"}).link.bandwidth_bytes_per_s, 18 * 20e9 * eff);
  // Faster ports change nothing; fewer lanes on 25 GB/s ports carry less (12 x 25).
  EXPECT_DOUBLE_EQ(paramsOf("h200-sxm", {"fabric.port_bandwidth=50 GB/s"}).link.bandwidth_bytes_per_s, 450e9 * eff);
  EXPECT_DOUBLE_EQ(paramsOf("h200-sxm", {"fabric.link.lanes=12", "fabric.port_bandwidth=25 GB/s"}).link.bandwidth_bytes_per_s,
                   300e9 * eff);
  // The wiring must fit the ports, named by key with the count it needs.
  const std::string mesh = errorOf({"fabric.ports=6"});
  EXPECT_NE(mesh.find("needs 7 link(s) x 1 lane(s) = 7 ports, more than its 6 (fabric.ports)"), std::string::npos) << mesh;
  EXPECT_EQ(errorOf({"fabric.ports=7"}), "");
  const std::string plane = errorOf({"fabric.switch_ports=100"}, "h200-sxm");
  EXPECT_NE(plane.find("needs 8 link(s) x 18 lane(s) = 144 ports, more than its 100 (fabric.switch_ports)"),
            std::string::npos) << plane;
  const std::string lanes = errorOf({"fabric.link.lanes=24"}, "h200-sxm");   // 24 lanes, 18 ports per GPU
  EXPECT_NE(lanes.find("more than its 18 (fabric.ports)"), std::string::npos) << lanes;
  const std::string cards = errorOf({"fabric.ports=2"}, "mlu370-x8");   // 4 cards: 3 peers each
  EXPECT_NE(cards.find("each card of a card_group of 8 devices needs 3 link(s)"), std::string::npos) << cards;
  EXPECT_NE(errorOf({"fabric.switch_ports=64"}).find("only a 'switch' shape"), std::string::npos);
  EXPECT_NE(errorOf({"fabric.link.lanes=0"}).find("device.fabric.link.lanes"), std::string::npos);
  const std::string garbled = errorOf({"fabric.ports=abc"});   // said once, not checked as 1 port
  EXPECT_NE(garbled.find("device.fabric.ports"), std::string::npos) << garbled;
  EXPECT_EQ(garbled.find("(fabric.ports)"), std::string::npos) << garbled;
}

TEST(FabricConfig, NicMessageRateCostsEachNicCrossedAndOversubscriptionTakesRatios) {
  // Between nodes a transfer crosses its own NIC and the peer's: 1/message_rate in each.
  const auto latency = [](const std::vector<std::string>& overrides) {
    std::vector<std::string> o = overrides;
    o.push_back("fabric.nodes=2");
    const fabric::Topology t = fabric::buildTopology(paramsOf("br100", o));
    return t.routeLatency(t.devices()[0], t.devices()[8]) - t.routeLatency(t.devices()[0], t.devices()[1]);
  };
  const double slow = latency({"fabric.nic.message_rate=1 M/s"}), fast = latency({"fabric.nic.message_rate=1 G/s"});
  EXPECT_NEAR(slow - fast, 2 * (1e-6 - 1e-9), 1e-15);
  EXPECT_DOUBLE_EQ(paramsOf("br100", {}).nic.message_rate_per_s, 215e6);
  // The PCIe cards' NICs sit on their node's PCIe switch; a mesh has no switch for them.
  EXPECT_TRUE(paramsOf("mlu370-x4", {}).nic.on_switch);
  EXPECT_FALSE(paramsOf("h100-sxm", {}).nic.on_switch);
  EXPECT_NE(errorOf({"fabric.nic.on_switch=true"}).find("only a 'switch' shape has a switch for its NICs"),
            std::string::npos);
  EXPECT_NE(errorOf({"fabric.nic.message_rate=0 M/s"}).find("device.fabric.nic.message_rate"), std::string::npos);
  EXPECT_NE(errorOf({"fabric.nic.message_rate=215"}).find("device.fabric.nic.message_rate"), std::string::npos);
  // Oversubscription as a fraction or a ratio: the spine link carries 8 NICs' worth / 1.5.
  EXPECT_DOUBLE_EQ(paramsOf("br100", {"fabric.oversubscription=1.5"}).oversubscription, 1.5);
  EXPECT_DOUBLE_EQ(paramsOf("br100", {"fabric.oversubscription=3:2"}).oversubscription, 1.5);
  const fabric::FabricParams two = paramsOf("br100", {"fabric.oversubscription=3:2", "fabric.nodes=2"});
  const fabric::Topology t = fabric::buildTopology(two);
  double spine = 0;
  for (std::size_t l = 0; l < t.linkCount(); ++l)
    if (t.link(fabric::LinkId{static_cast<uint32_t>(l)}).name == "node0.leaf->spine")
      spine = t.link(fabric::LinkId{static_cast<uint32_t>(l)}).params.bandwidth_bytes_per_s;
  EXPECT_DOUBLE_EQ(spine, 8 * two.nic.link.bandwidth_bytes_per_s / 1.5);
  EXPECT_NE(errorOf({"fabric.oversubscription=0.5"}).find("must be at least 1"), std::string::npos);
}

TEST(FabricModel, FlowsLateInALongRunFinishWhenTheirTimeVanishesInTheClock) {
  // h100-sxm's NICs at 100 messages/s: 10 ms per NIC crossed, so a 1 KiB hierarchical
  // all-reduce over 2 nodes runs for tens of ms, and its last flows' attoseconds fall below
  // the clock's resolution there (this once spun forever). Its 2 steps across nodes each
  // cross 2 NICs: 40 ms and change.
  sim::FabricModel model(paramsOf("h100-sxm", {"fabric.nic.message_rate=100/s", "fabric.nodes=2"}));
  std::vector<int> ranks(16);
  for (int r = 0; r < 16; ++r) ranks[r] = r;
  const double t = model.time(fabric::CollectiveOp::AllReduce, 1024, ranks, 0, 0, "hierarchical").seconds;
  EXPECT_GT(t, 0.04);
  EXPECT_LT(t, 0.0401);
}

TEST(FabricModel, TimesGroupsByGlobalRankAndGrowsNodesAsNeeded) {
  sim::SimOptions o;
  o.preset = "h100-sxm";
  o.overrides = {"fabric.link.bandwidth=400 GB/s", "fabric.link.latency=1 us", "fabric.switch_latency=0.5 us",
                 "fabric.link.efficiency=1", "fabric.collective_latency=0 us", "fabric.reduction_efficiency=1"};
  const fabric::FabricParams fp = sim::loadFabricParams(o);
  sim::FabricModel m(fp);
  using fabric::CollectiveOp;
  // A group of one moves nothing; a point-to-point to itself neither.
  EXPECT_EQ(m.time(CollectiveOp::Broadcast, 1e6, {3}, 0, 0, "").seconds, 0.0);
  EXPECT_EQ(m.time(CollectiveOp::SendRecv, 1e6, {2, 2}, 0, 1, "").seconds, 0.0);
  // Ranks 0 and 5 of one node: one transfer through the switch.
  const auto p2p = m.time(CollectiveOp::SendRecv, 8e6, {0, 5}, 0, 1, "");
  EXPECT_NEAR(p2p.seconds, 2e-6 + 0.5e-6 + 8e6 / 400e9, 1e-12);
  // Forced ring over a subgroup: 2(n-1) steps of S/n, each in q chunks of the preset's
  // size through the ring's pipeline (6 q + 5 chunk phases, the first 6 paying the latency).
  const auto ring = m.time(CollectiveOp::AllReduce, 64e6, {1, 3, 5, 7}, 0, 0, "ring");
  EXPECT_EQ(ring.algorithm, "ring");
  ASSERT_EQ(fp.channels, 1u);
  const double q = std::ceil(16e6 / fp.chunk_bytes);
  EXPECT_EQ(q, 8.0);   // 2 MiB chunks
  EXPECT_NEAR(ring.seconds, 6 * 2.5e-6 + (6 * q + 5) * (16e6 / q / 400e9), 1e-12);
  // Rank 12 lives on a second node: the topology grows, the transfer crosses the NICs.
  const auto far = m.time(CollectiveOp::SendRecv, 8e6, {0, 12}, 0, 1, "");
  EXPECT_GT(far.seconds, p2p.seconds * 5);
  EXPECT_THROW(m.time(CollectiveOp::SendRecv, 1, {0, 1}, 0, 2, ""), std::invalid_argument);
  EXPECT_THROW(m.time(CollectiveOp::Broadcast, 1, {0, 1}, 2, 0, ""), std::invalid_argument);
  EXPECT_THROW(m.time(CollectiveOp::AllReduce, 1, {0, -1}, 0, 0, ""), std::invalid_argument);
  EXPECT_THROW(m.time(CollectiveOp::AllReduce, 1, {0, 1}, 0, 0, "butterfly"), std::invalid_argument);
}

// The default choice is remembered per request: a model that has answered other sizes,
// groups and ops first (in any order) answers each exactly as a fresh one does, and the
// choice still changes with size where the tuner's does.
TEST(FabricModel, RememberedAlgorithmChoicesAnswerAsAFreshModel) {
  sim::SimOptions o;
  o.preset = "h100-sxm";
  const fabric::FabricParams params = sim::loadFabricParams(o);
  using fabric::CollectiveOp;
  struct Ask {
    CollectiveOp op;
    double bytes;
    std::vector<int> ranks;
  };
  std::vector<Ask> asks;
  for (double b = 1024; b <= 1024.0 * 1024 * 1024; b *= 8)
    for (const auto& ranks : {std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}, std::vector<int>{0, 5}, std::vector<int>{1, 3, 5, 7}})
      for (CollectiveOp op : {CollectiveOp::AllReduce, CollectiveOp::AllGather, CollectiveOp::Broadcast})
        asks.push_back({op, b, ranks});
  sim::FabricModel used(params);
  for (auto it = asks.rbegin(); it != asks.rend(); ++it) (void)used.time(it->op, it->bytes, it->ranks, 0, 0, "");
  std::set<std::string> algorithms;
  for (const Ask& a : asks) {
    sim::FabricModel fresh(params);
    const auto want = fresh.time(a.op, a.bytes, a.ranks, 0, 0, "");
    const auto got = used.time(a.op, a.bytes, a.ranks, 0, 0, "");
    EXPECT_EQ(got.algorithm, want.algorithm) << a.bytes;
    EXPECT_EQ(got.seconds, want.seconds) << a.bytes;
    if (a.op == CollectiveOp::AllReduce && a.ranks.size() == 2) algorithms.insert(want.algorithm);
  }
  EXPECT_EQ(algorithms, (std::set<std::string>{"ring", "switch"}));   // by size, as the tuner chooses
}

TEST(FabricConfig, AMeshIsRefusedPastItsPortsAndPastItsSizeLimit) {
  // The MLU-Link bridge fully connects 4 cards: a card has links to 3 others.
  EXPECT_NE(errorOf({"fabric.devices_per_node=16"}, "mlu370-x8")
                .find("each card of a card_group of 16 devices needs 7 link(s) x 1 lane(s) = 7 ports, more than its "
                      "3 (fabric.ports)"),
            std::string::npos);
  EXPECT_EQ(errorOf({"fabric.devices_per_node=4"}, "mlu370-x8"), "");
  // A mesh's links grow as the square of its devices: refused by key past 1024 a node, at once.
  for (const char* preset : {"mlu590", "mlu370-x8"}) {
    const std::string why = errorOf({"fabric.devices_per_node=100000", "fabric.ports=1000000"}, preset);
    EXPECT_NE(why.find("100000 devices per node (devices_per_node) is past this shape's 1024"), std::string::npos)
        << preset << ": " << why;
  }
  EXPECT_EQ(errorOf({"fabric.devices_per_node=1024"}, "mlu590"), "");
}
