// Peer copies over the fabric: between devices the preset's fabric joins, a copy crosses
// the fabric's route (its latency, then its bytes at the max-min share of every link on
// the route) instead of both cards' PCIe links.
#include "ShimTestUtil.h"
#include "device_models/fabric/FabricParams.h"
#include "simulator/FabricConfig.h"
#include "simulator/FabricModel.h"

#include <algorithm>
#include <limits>

namespace shim = cardsim::shim;
namespace fabric = cardsim::fabric;
using namespace cardsim::testing;

namespace {

constexpr double kTolerance = 0.02;

// The topology a process of `devices` devices of `preset` has (device d is device rank d).
fabric::Topology topologyOf(const std::string& preset, uint32_t devices) {
  cardsim::sim::SimOptions o;
  o.preset = preset;
  o.devices = devices;
  fabric::FabricParams p = cardsim::sim::loadFabricParams(o);
  p.nodes = fabric::nodesFor(p, devices);
  return fabric::buildTopology(p);
}

// latency + bytes / (the route's slowest link at copy engines' rate), for one copy alone.
double alone(const fabric::Topology& t, int src, int dst, double bytes) {
  const fabric::NodeId a = t.devices()[src], b = t.devices()[dst];
  double slowest = std::numeric_limits<double>::infinity();
  for (fabric::LinkId l : t.route(a, b)) slowest = std::min(slowest, t.link(l).params.copyBandwidth());
  return t.routeLatency(a, b) + bytes / slowest;
}

struct Buffers {
  std::vector<void*> on;   // one per device
};
Buffers allocate(int devices, size_t bytes) {
  Buffers b;
  for (int d = 0; d < devices; ++d) {
    void* p = nullptr;
    EXPECT_TRUE(shim::setDevice(d).ok());
    EXPECT_TRUE(shim::malloc(&p, bytes).ok());
    b.on.push_back(p);
  }
  EXPECT_TRUE(shim::setDevice(0).ok());
  return b;
}

shim::Stream streamOn(int device) {
  shim::Stream s = nullptr;
  EXPECT_TRUE(shim::setDevice(device).ok());
  EXPECT_TRUE(shim::streamCreate(&s).ok());
  return s;
}

}  // namespace

TEST(FabricLinks, PeerCopyAloneCrossesTheFabricRouteNotPcie) {
  const auto p = startRuntime("mlu370-x8", 4);
  const auto t = topologyOf("mlu370-x8", 4);
  const size_t bytes = 256ull << 20;
  Buffers b = allocate(4, bytes);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  // Chips 0 and 1 share a card (its on-card link); chip 2 is on the next card (a link
  // between cards, shared by the card's chips).
  ASSERT_SHIM_OK(shim::memcpyPeerAsync(b.on[1], 1, b.on[0], 0, bytes, nullptr));
  ASSERT_SHIM_OK(shim::memcpyPeerAsync(b.on[2], 2, b.on[0], 0, bytes, nullptr));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = named(drain(), "memcpy peer");
  ASSERT_EQ(acts.size(), 2u);
  const double on_card = alone(t, 0, 1, bytes), across = alone(t, 0, 2, bytes);
  EXPECT_NEAR(durationS(acts[0]), on_card, kTolerance * on_card);
  EXPECT_NEAR(durationS(acts[1]), across, kTolerance * across);
  // Not the host links: PCIe would give both the same time.
  const double pcie = p.host_link.latency_s + bytes / (cardsim::model::pcieLaneBytesPerSecond(p.host_link.pcie_generation) *
                                                       p.host_link.lanes * p.host_link.efficiency);
  EXPECT_GT(std::abs(durationS(acts[0]) - pcie), 0.1 * pcie);
  EXPECT_LT(durationS(acts[0]), 0.5 * durationS(acts[1]));   // 100 GB/s on the card, 33.3 between cards
}

TEST(FabricLinks, CopiesSharingALinkSplitItAndOthersKeepTheirRate) {
  startRuntime("mlu370-x8", 6);
  const auto t = topologyOf("mlu370-x8", 6);
  const size_t bytes = 128ull << 20;
  Buffers b = allocate(6, bytes);
  shim::Stream s0 = streamOn(0), s1 = streamOn(1), s2 = streamOn(2), s4 = streamOn(4);
  ASSERT_SHIM_OK(shim::setDevice(0));
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  // 0 -> 2 and 1 -> 3 both cross the link from card 0's ports to card 1's: each gets half.
  ASSERT_SHIM_OK(shim::memcpyPeerAsync(b.on[2], 2, b.on[0], 0, bytes, s0));
  ASSERT_SHIM_OK(shim::memcpyPeerAsync(b.on[3], 3, b.on[1], 1, bytes, s1));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  for (int d = 1; d < 6; ++d) {
    ASSERT_SHIM_OK(shim::setDevice(d));
    ASSERT_SHIM_OK(shim::deviceSynchronize());
  }
  auto shared = named(drain(), "memcpy peer");
  ASSERT_EQ(shared.size(), 2u);
  const double link_bw = t.routeBandwidth(t.devices()[0], t.devices()[2]);
  const double both = t.routeLatency(t.devices()[0], t.devices()[2]) + 2.0 * bytes / link_bw;
  for (const auto& a : shared) EXPECT_NEAR(durationS(a), both, kTolerance * both) << a.device;
  // 2 -> 0 and 4 -> 0 share only chip 0's on-card link (100 GB/s, so 50 each), which is
  // not their bottleneck: each still moves at its card-to-card link's 33.3 GB/s (max-min
  // over the whole route, not an even split of every link).
  ASSERT_SHIM_OK(shim::memcpyPeerAsync(b.on[0], 0, b.on[2], 2, bytes, s2));
  ASSERT_SHIM_OK(shim::memcpyPeerAsync(b.on[0], 0, b.on[4], 4, bytes, s4));
  for (int d = 0; d < 6; ++d) {
    ASSERT_SHIM_OK(shim::setDevice(d));
    ASSERT_SHIM_OK(shim::deviceSynchronize());
  }
  auto apart = named(drain(), "memcpy peer");
  ASSERT_EQ(apart.size(), 2u);
  EXPECT_NEAR(durationS(apart[0]), alone(t, 2, 0, bytes), kTolerance * alone(t, 2, 0, bytes));
  EXPECT_NEAR(durationS(apart[1]), alone(t, 4, 0, bytes), kTolerance * alone(t, 4, 0, bytes));
}

TEST(FabricLinks, NvlinkPeerCopyOfTheA100ReferenceRunsAtItsLinkRate) {
  startRuntime("a100-sxm", 2);
  const auto t = topologyOf("a100-sxm", 2);
  const size_t bytes = 512ull << 20;
  Buffers b = allocate(2, bytes);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  ASSERT_SHIM_OK(shim::memcpyPeerAsync(b.on[1], 1, b.on[0], 0, bytes, nullptr));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = named(drain(), "memcpy peer");
  ASSERT_EQ(acts.size(), 1u);
  const double expected = alone(t, 0, 1, bytes);
  EXPECT_NEAR(durationS(acts[0]), expected, kTolerance * expected);
  // Published: 512 MiB GPU0 -> GPU1 over NVLink3 in 1959 us (274 GB/s, copy engines). The
  // copy runs at NVLink's packet-format share of the link (16 data flits of 18: 267 GB/s),
  // not at the collectives' efficiency (235 GB/s, 2294 us: 17 % slow).
  EXPECT_NEAR(durationS(acts[0]), 1959e-6, 0.05 * 1959e-6);
  EXPECT_LT(durationS(acts[0]), bytes / t.routeBandwidth(t.devices()[0], t.devices()[1]));
}

TEST(FabricLinks, CopyEfficiencyIsTheCopiesOwnAndOverridable) {
  cardsim::sim::SimOptions o;
  o.preset = "a100-sxm";
  fabric::FabricParams f = cardsim::sim::loadFabricParams(o);
  EXPECT_DOUBLE_EQ(f.link.copy_bandwidth_bytes_per_s, 300e9 * 0.889);
  EXPECT_DOUBLE_EQ(f.link.bandwidth_bytes_per_s, 300e9 * 0.783);   // collectives keep theirs
  // Unset, copies reach what collectives do (the MLU and BR presets publish no such figure).
  o.preset = "br100";
  f = cardsim::sim::loadFabricParams(o);
  EXPECT_EQ(f.link.copy_bandwidth_bytes_per_s, 0.0);
  EXPECT_DOUBLE_EQ(f.link.copyBandwidth(), f.link.bandwidth_bytes_per_s);
  o.overrides = {"fabric.link.copy_efficiency=0.5"};
  f = cardsim::sim::loadFabricParams(o);
  EXPECT_GT(f.link.copy_bandwidth_bytes_per_s, 0.0);
  // br100's link is at its efficiency; the copies' figure is of the raw bandwidth.
  o.overrides = {"fabric.link.copy_efficiency=0.5", "fabric.link.efficiency=0.25"};
  const fabric::FabricParams g = cardsim::sim::loadFabricParams(o);
  EXPECT_DOUBLE_EQ(g.link.copy_bandwidth_bytes_per_s, 2 * g.link.bandwidth_bytes_per_s);
  o.overrides = {"fabric.link.copy_efficiency=1.5"};
  try {
    (void)cardsim::sim::loadFabricParams(o);
    ADD_FAILURE() << "copy_efficiency 1.5 was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("device.fabric.link.copy_efficiency"), std::string::npos) << e.what();
  }
}

TEST(FabricLinks, ACollectiveOnTheSameLinksHoldsAPeerCopyBackWhileItRuns) {
  // One process driving chips 0-3 of an MLU370-X8 group: an all-reduce of chips 0 and 2
  // (each member's command on its own card) crosses the link between cards 0 and 1, and so
  // does a copy from chip 1 to chip 3. While the collective runs, its traffic on each link
  // (the fabric model's bytes over its time) is not the copy's: the copy moves at what its
  // route has left, then at the full rate once the collective has ended.
  startRuntime("mlu370-x8", 4);
  const auto t = topologyOf("mlu370-x8", 4);
  const size_t copy_bytes = 256ull << 20;
  const double coll_bytes = 64.0 * (1 << 20);
  Buffers b = allocate(4, copy_bytes);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  shim::CollectiveDesc c;
  c.op = "all_reduce";
  c.bytes = coll_bytes;
  c.ranks = {0, 2};
  const shim::Stream s0 = streamOn(0), s2 = streamOn(2), s1 = streamOn(1);
  ASSERT_SHIM_OK(shim::setDevice(0));
  ASSERT_SHIM_OK(shim::launchFabricCollective(s0, c, nullptr, nullptr));
  ASSERT_SHIM_OK(shim::setDevice(2));
  ASSERT_SHIM_OK(shim::launchFabricCollective(s2, c, nullptr, nullptr));
  ASSERT_SHIM_OK(shim::setDevice(1));
  ASSERT_SHIM_OK(shim::memcpyPeerAsync(b.on[3], 3, b.on[1], 1, copy_bytes, s1));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  const auto all = drain();
  std::vector<shim::ActivityRecord> colls, copies = named(all, "memcpy peer");
  for (const auto& a : all)
    if (a.kind == shim::ActivityRecord::Kind::Collective) colls.push_back(a);
  ASSERT_EQ(colls.size(), 2u);
  ASSERT_EQ(copies.size(), 1u);
  // The collective's traffic per link, as the fabric model lays it out.
  cardsim::sim::SimOptions o;
  o.preset = "mlu370-x8";
  cardsim::sim::FabricModel model(cardsim::sim::loadFabricParams(o));
  cardsim::sim::FabricModel::LinkLoads loads;
  const double coll_s = model.time(fabric::CollectiveOp::AllReduce, coll_bytes, {0, 2}, 0, 1, "", &loads).seconds;
  EXPECT_NEAR(durationS(colls[0]), coll_s, 1e-9);   // its own time is the model's, copy or not
  // The copy's rate while the collective runs: the least its route's links have left.
  const fabric::NodeId from = t.devices()[1], to = t.devices()[3];
  double during = std::numeric_limits<double>::infinity(), full = during;
  bool shared = false;
  for (fabric::LinkId l : t.route(from, to)) {
    const fabric::Link& link = t.link(l);
    auto it = loads.find(link.name);
    const double taken = it == loads.end() ? 0.0 : it->second.bytes / coll_s;
    shared = shared || taken > 0;
    during = std::min(during, link.params.bandwidth_bytes_per_s - taken);
    full = std::min(full, link.params.bandwidth_bytes_per_s);
  }
  ASSERT_TRUE(shared) << "the copy's route should cross a link of the collective's";
  ASSERT_LT(during, full);
  // Closed form from the copy's start: the route's latency, bytes at `during` until the
  // collective ends, the rest at `full`.
  const double start = seconds(copies[0].start_ps), coll_end = seconds(std::max(colls[0].end_ps, colls[1].end_ps));
  const double moving = start + t.routeLatency(from, to);
  const double held = std::max(0.0, coll_end - moving);
  const double expected = held * during >= copy_bytes
                              ? moving + copy_bytes / during - start
                              : coll_end - start + (copy_bytes - held * during) / full;
  EXPECT_NEAR(durationS(copies[0]), expected, kTolerance * expected);
  EXPECT_GT(durationS(copies[0]), 1.05 * alone(t, 1, 3, copy_bytes));
}
