// The async-correctness checker (shim.h, driver_shim/src/AsyncChecker.h): each planted
// ordering bug is reported with both sides, and the same program with the missing event
// wait, synchronize or record_stream-style wait reports nothing.
#include <vector>

#include "ShimTestUtil.h"

namespace cardsim {
namespace {

using namespace cardsim::testing;
using Kind = shim::CheckReport::Kind;

struct CheckerTest : ::testing::Test {
  void SetUp() override {
    startRuntime("mlu370-x8", 1);
    ASSERT_SHIM_OK(shim::checkEnable(true));
    ASSERT_SHIM_OK(shim::streamCreate(&a));
    ASSERT_SHIM_OK(shim::streamCreate(&b));
    ASSERT_SHIM_OK(shim::malloc(&buf, 4096));
    ASSERT_SHIM_OK(shim::streamGetId(a, &id_a));
    ASSERT_SHIM_OK(shim::streamGetId(b, &id_b));
  }
  std::vector<shim::CheckReport> reports() {
    std::vector<shim::CheckReport> r;
    EXPECT_TRUE(shim::checkDrainReports(&r).ok());
    return r;
  }
  // Site handles stand for the framework's stacks.
  void access(shim::Stream s, std::size_t offset, std::size_t bytes, bool write, uint64_t site) {
    shim::checkSetSite(site);
    ASSERT_SHIM_OK(shim::checkDeviceAccess(s, static_cast<char*>(buf) + offset, bytes, write));
  }
  shim::Stream a = nullptr, b = nullptr;
  uint32_t id_a = 0, id_b = 0;
  void* buf = nullptr;
};

TEST_F(CheckerTest, UseOnAnotherStreamWithoutAWaitIsReportedWithBothSides) {
  access(a, 0, 1024, true, 11);
  access(b, 512, 1024, false, 22);
  auto r = reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, Kind::StreamRace);
  EXPECT_EQ(r[0].address, reinterpret_cast<uintptr_t>(buf) + 512);
  EXPECT_EQ(r[0].bytes, 512u);   // only the overlap
  EXPECT_EQ(r[0].memory_device, 0);
  EXPECT_EQ(r[0].producer.site, 11u);
  EXPECT_TRUE(r[0].producer.write);
  EXPECT_EQ(r[0].producer.stream_id, id_a);
  EXPECT_EQ(r[0].offender.site, 22u);
  EXPECT_FALSE(r[0].offender.write);
  EXPECT_EQ(r[0].offender.stream_id, id_b);
  // Reported once: the same read again is not a new report.
  access(b, 512, 1024, false, 22);
  EXPECT_TRUE(reports().empty());
}

TEST_F(CheckerTest, DisjointRangesAndReadsOfReadsAreNotRaces) {
  access(a, 0, 1024, true, 1);
  access(b, 1024, 1024, true, 2);   // the next bytes: no overlap
  access(a, 2048, 64, false, 3);
  access(b, 2048, 64, false, 4);    // two readers
  EXPECT_TRUE(reports().empty());
}

TEST_F(CheckerTest, AnEventWaitOrAHostSynchronizeOrdersTheUses) {
  shim::Event e;
  ASSERT_SHIM_OK(shim::eventCreate(&e));
  access(a, 0, 1024, true, 1);
  ASSERT_SHIM_OK(shim::eventRecord(e, a));
  ASSERT_SHIM_OK(shim::streamWaitEvent(b, e));
  access(b, 0, 1024, true, 2);
  EXPECT_TRUE(reports().empty());
  // A write on b, then a on the host's word only: the host synchronized b before queuing.
  ASSERT_SHIM_OK(shim::streamSynchronize(b));
  access(a, 0, 1024, false, 3);
  EXPECT_TRUE(reports().empty());
  // An event recorded before the write orders nothing about it.
  ASSERT_SHIM_OK(shim::eventRecord(e, a));
  access(a, 0, 1024, true, 4);
  ASSERT_SHIM_OK(shim::streamWaitEvent(b, e));
  access(b, 0, 1024, false, 5);
  auto r = reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].producer.site, 4u);
  EXPECT_EQ(r[0].offender.site, 5u);
}

TEST_F(CheckerTest, ABlockReusedWhileAnotherStreamStillReadsItIsAFreedReuse) {
  access(a, 0, 256, true, 1);
  shim::Event e;
  ASSERT_SHIM_OK(shim::eventCreate(&e));
  ASSERT_SHIM_OK(shim::eventRecord(e, a));
  ASSERT_SHIM_OK(shim::streamWaitEvent(b, e));
  access(b, 0, 256, false, 2);                // used on b (no record_stream)
  ASSERT_SHIM_OK(shim::checkBlockFreed(buf, 256));
  access(a, 0, 256, true, 3);                 // handed out again on a
  auto r = reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, Kind::FreedReuse);
  EXPECT_EQ(r[0].producer.site, 2u);
  EXPECT_EQ(r[0].producer.stream_id, id_b);
  // With the allocator's wait (an event recorded on b after the use, queried complete
  // before the block is handed out again), nothing is reported.
  access(b, 1024, 256, false, 4);
  ASSERT_SHIM_OK(shim::checkBlockFreed(static_cast<char*>(buf) + 1024, 256));
  ASSERT_SHIM_OK(shim::eventRecord(e, b));
  ASSERT_SHIM_OK(shim::eventSynchronize(e));
  access(a, 1024, 256, true, 5);
  EXPECT_TRUE(reports().empty());
}

TEST_F(CheckerTest, TheHostReadingAnUnfinishedDeviceToHostCopyIsReported) {
  std::vector<char> host(1024);
  shim::checkSetSite(7);
  ASSERT_SHIM_OK(shim::memcpyAsync(host.data(), buf, 1024, shim::MemcpyKind::DeviceToHost, a));
  shim::checkSetSite(8);
  ASSERT_SHIM_OK(shim::checkHostAccess(host.data() + 100, 4, false));
  auto r = reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, Kind::HostRead);
  EXPECT_EQ(r[0].producer.site, 7u);
  EXPECT_TRUE(r[0].offender.host);
  EXPECT_EQ(r[0].memory_device, -1);
  // After synchronizing, the same read is fine.
  ASSERT_SHIM_OK(shim::memcpyAsync(host.data(), buf, 1024, shim::MemcpyKind::DeviceToHost, a));
  ASSERT_SHIM_OK(shim::streamSynchronize(a));
  ASSERT_SHIM_OK(shim::checkHostAccess(host.data(), 1024, false));
  EXPECT_TRUE(reports().empty());
  // A synchronous copy needs no synchronize.
  ASSERT_SHIM_OK(shim::memcpy(host.data(), buf, 1024, shim::MemcpyKind::DeviceToHost));
  ASSERT_SHIM_OK(shim::checkHostAccess(host.data(), 1024, true));
  EXPECT_TRUE(reports().empty());
}

TEST_F(CheckerTest, TheHostOverwritingTheSourceOfAnUnfinishedHostToDeviceCopyIsReported) {
  std::vector<char> host(1024);
  ASSERT_SHIM_OK(shim::memcpyAsync(buf, host.data(), 1024, shim::MemcpyKind::HostToDevice, a));
  ASSERT_SHIM_OK(shim::checkHostAccess(host.data(), 8, false));   // reading it is fine
  EXPECT_TRUE(reports().empty());
  ASSERT_SHIM_OK(shim::checkHostAccess(host.data(), 8, true));
  auto r = reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, Kind::HostWrite);
  EXPECT_FALSE(r[0].producer.write);
}

TEST_F(CheckerTest, WritingABufferAGraphReplayUsesIsAGraphReplayRace) {
  ASSERT_SHIM_OK(shim::streamBeginCapture(a));
  access(a, 0, 512, false, 1);     // the graph reads its static input
  access(a, 512, 512, true, 2);    // and writes its output
  ASSERT_SHIM_OK(shim::launchKernel(a, "k", shim::KernelCost{}, {}));
  shim::Graph g;
  ASSERT_SHIM_OK(shim::streamEndCapture(a, &g));
  EXPECT_TRUE(reports().empty());   // captured accesses are checked at replay
  shim::checkSetSite(3);
  ASSERT_SHIM_OK(shim::graphLaunch(g, a));
  access(b, 0, 512, true, 4);      // refills the input while the replay may still read it
  auto r = reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, Kind::GraphReplay);
  EXPECT_EQ(r[0].producer.graph, 1u);
  EXPECT_EQ(r[0].producer.site, 3u);   // the replay's site
  // Refilling on the replay stream itself is ordered (b's refill is waited for first).
  ASSERT_SHIM_OK(shim::streamSynchronize(b));
  ASSERT_SHIM_OK(shim::graphLaunch(g, a));
  access(a, 0, 512, true, 5);
  EXPECT_TRUE(reports().empty());
}

TEST_F(CheckerTest, ADeviceSynchronizeDropsEverythingTheShadowHeld) {
  for (int i = 0; i < 8; ++i) access(i % 2 ? a : b, i * 256, 256, true, 1);
  EXPECT_EQ(shim::checkPendingReports(), 0u);
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  access(a, 0, 4096, true, 2);   // ordered after everything: no report
  EXPECT_TRUE(reports().empty());
}

TEST_F(CheckerTest, OffReportsNothingAndTurningItOnStartsClean) {
  access(a, 0, 64, true, 1);
  ASSERT_SHIM_OK(shim::checkEnable(false));
  EXPECT_FALSE(shim::checkEnabled());
  access(b, 0, 64, true, 2);
  EXPECT_EQ(shim::checkPendingReports(), 0u);
  ASSERT_SHIM_OK(shim::checkEnable(true));
  access(b, 0, 64, true, 3);   // a's write before enabling is forgotten
  EXPECT_TRUE(reports().empty());
}

}  // namespace
}  // namespace cardsim
