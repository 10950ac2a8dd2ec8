// Peer copies over the fabric: between devices the preset's fabric joins, a copy crosses
// the fabric's route (its latency, then its bytes at the max-min share of every link on
// the route) instead of both cards' PCIe links.
#include "ShimTestUtil.h"
#include "device_models/fabric/FabricParams.h"
#include "simulator/FabricConfig.h"

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

// latency + bytes / (the route's slowest link), for one copy alone.
double alone(const fabric::Topology& t, int src, int dst, double bytes) {
  const fabric::NodeId a = t.devices()[src], b = t.devices()[dst];
  return t.routeLatency(a, b) + bytes / t.routeBandwidth(a, b);
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
  // Published: 512 MiB GPU0 -> GPU1 over NVLink3 in 1959 us (274 GB/s, copy engines); the
  // preset's link carries the collectives' efficiency (235 GB/s), so the model is within 20%.
  EXPECT_NEAR(durationS(acts[0]), 1959e-6, 0.2 * 1959e-6);
}
