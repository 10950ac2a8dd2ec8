// Handles (streams, events, graphs) are released on destroy, host functions run in stream
// order and become graph nodes, and host threads share a clock across a hand-off.
#include <chrono>
#include <thread>

#include "ShimTestUtil.h"

namespace shim = cardsim::shim;
using namespace cardsim::testing;

TEST(ShimHandles, CreatingAndDestroyingHandlesKeepsMemoryFlat) {
  startRuntime("mlu370-x8", 1);
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  auto cycle = [&](int n) {
    for (int i = 0; i < n; ++i) {
      shim::Event e;
      ASSERT_SHIM_OK(shim::eventCreate(&e));
      ASSERT_SHIM_OK(shim::eventRecord(e, s));
      ASSERT_SHIM_OK(shim::eventDestroy(e));
      shim::Stream t;
      ASSERT_SHIM_OK(shim::streamCreate(&t));
      ASSERT_SHIM_OK(shim::streamDestroy(t));
      ASSERT_SHIM_OK(shim::streamBeginCapture(s));
      ASSERT_SHIM_OK(shim::launchKernel(s, "k", memoryBound(64, 1), [] {}));
      shim::Graph g;
      ASSERT_SHIM_OK(shim::streamEndCapture(s, &g));
      ASSERT_SHIM_OK(shim::graphDestroy(g));
    }
  };
  cycle(10000);   // warm up the pools and the simulator's own buffers
  ASSERT_SHIM_OK(shim::streamSynchronize(s));
  const long before = residentBytes();
  cycle(300000);
  ASSERT_SHIM_OK(shim::streamSynchronize(s));
  // Kept objects would cost >100 bytes each, i.e. tens of MB for 900000 handles.
  if (kResidentSetMeaningful) {
    EXPECT_LT(residentBytes(), before + (8l << 20)) << "rss grew from " << before;
  }
}

TEST(ShimHandles, ADestroyedHandleIsRefusedUntilReused) {
  startRuntime("mlu370-x8", 1);
  shim::Event e;
  ASSERT_SHIM_OK(shim::eventCreate(&e));
  ASSERT_SHIM_OK(shim::eventDestroy(e));
  const shim::Status q = shim::eventQuery(e);
  EXPECT_EQ(q.code(), shim::Code::InvalidHandle);
  EXPECT_NE(q.message().find("destroyed"), std::string::npos) << q.toString();
  EXPECT_EQ(shim::eventDestroy(e).code(), shim::Code::InvalidHandle);   // no double release
  shim::Event again;
  ASSERT_SHIM_OK(shim::eventCreate(&again));
  EXPECT_EQ(again, e);   // the released object is reused
  ASSERT_SHIM_OK(shim::eventQuery(again));
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  ASSERT_SHIM_OK(shim::streamDestroy(s));
  EXPECT_EQ(shim::streamSynchronize(s).code(), shim::Code::InvalidHandle);
  EXPECT_EQ(shim::streamDestroy(s).code(), shim::Code::InvalidHandle);
}

TEST(ShimHandles, HostFunctionsRunInOrderAndReplayAsGraphNodes) {
  startRuntime("mlu370-x8", 1);
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  std::vector<std::string> order;
  uint64_t t0, t1;
  ASSERT_SHIM_OK(shim::hostTimePs(&t0));
  ASSERT_SHIM_OK(shim::launchHostFunc(s, [&] { order.push_back("eager"); }));
  ASSERT_SHIM_OK(shim::hostTimePs(&t1));
  EXPECT_EQ(order, std::vector<std::string>{"eager"});
  EXPECT_GT(t1, t0);   // one launch overhead
  order.clear();

  ASSERT_SHIM_OK(shim::streamBeginCapture(s));
  ASSERT_SHIM_OK(shim::launchKernel(s, "k1", memoryBound(64, 1), [&] { order.push_back("k1"); }));
  ASSERT_SHIM_OK(shim::launchHostFunc(s, [&] { order.push_back("host"); }));
  ASSERT_SHIM_OK(shim::launchKernel(s, "k2", memoryBound(64, 1), [&] { order.push_back("k2"); }));
  shim::Graph g;
  ASSERT_SHIM_OK(shim::streamEndCapture(s, &g));
  EXPECT_TRUE(order.empty());
  size_t nodes = 0;
  ASSERT_SHIM_OK(shim::graphNodeCount(g, &nodes));
  EXPECT_EQ(nodes, 3u);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  ASSERT_SHIM_OK(shim::graphLaunch(g, s));
  ASSERT_SHIM_OK(shim::streamSynchronize(s));
  EXPECT_EQ(order, (std::vector<std::string>{"k1", "host", "k2"}));
  size_t device_commands = 0;
  for (const auto& r : drain()) device_commands += r.kind == shim::ActivityRecord::Kind::Kernel;
  EXPECT_EQ(device_commands, 2u);   // a host node is no device work
  EXPECT_EQ(shim::launchHostFunc(s, nullptr).code(), shim::Code::InvalidValue);
}

TEST(ShimHandles, AThreadWorkingForABlockedCallerSharesItsClock) {
  auto p = startRuntime("mlu370-x8", 1);
  const uint64_t launch_ps = static_cast<uint64_t>(p.host.launch_overhead_s * 1e12 + 0.5);
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  // The caller runs ahead; a helper thread that worked earlier is behind it.
  uint64_t helper_before = 0;
  std::thread([&] {
    ASSERT_SHIM_OK(shim::launchKernel(s, "early", memoryBound(64, 1), {}));
    ASSERT_SHIM_OK(shim::hostTimePs(&helper_before));
  }).join();
  for (int i = 0; i < 20; ++i) ASSERT_SHIM_OK(shim::launchKernel(s, "caller", memoryBound(64, 1), {}));
  uint64_t t0, t1;
  ASSERT_SHIM_OK(shim::hostTimePs(&t0));
  ASSERT_GT(t0, helper_before);

  ASSERT_SHIM_OK(shim::hostClockShareBegin());
  uint64_t helper_start = 0;
  std::thread([&] {
    ASSERT_SHIM_OK(shim::hostTimePs(&helper_start));
    for (int i = 0; i < 10; ++i) ASSERT_SHIM_OK(shim::launchKernel(s, "handed", memoryBound(64, 1), {}));
  }).join();
  ASSERT_SHIM_OK(shim::hostClockShareEnd());
  ASSERT_SHIM_OK(shim::hostTimePs(&t1));
  EXPECT_EQ(helper_start, t0);               // the helper starts at the hand-off
  EXPECT_EQ(t1, t0 + 10 * launch_ps);        // and its launches are the caller's time

  // Without a share, another thread's launches cost the caller nothing.
  std::thread([&] {
    ASSERT_SHIM_OK(shim::launchKernel(s, "apart", memoryBound(64, 1), {}));
  }).join();
  uint64_t t2;
  ASSERT_SHIM_OK(shim::hostTimePs(&t2));
  EXPECT_EQ(t2, t1);
}

TEST(ShimHandles, NestedSharesActOnlyAtTheOutermostEnd) {
  auto p = startRuntime("mlu370-x8", 1);
  const uint64_t launch_ps = static_cast<uint64_t>(p.host.launch_overhead_s * 1e12 + 0.5);
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  uint64_t t0, t1;
  ASSERT_SHIM_OK(shim::hostTimePs(&t0));
  ASSERT_SHIM_OK(shim::hostClockShareBegin());
  std::thread([&] {
    // A nested hand-off from the worker (reentrant backward) joins the outer share.
    ASSERT_SHIM_OK(shim::hostClockShareBegin());
    ASSERT_SHIM_OK(shim::launchKernel(s, "inner", memoryBound(64, 1), {}));
    ASSERT_SHIM_OK(shim::hostClockShareEnd());
    ASSERT_SHIM_OK(shim::launchKernel(s, "after inner", memoryBound(64, 1), {}));
  }).join();
  ASSERT_SHIM_OK(shim::hostClockShareEnd());
  ASSERT_SHIM_OK(shim::hostTimePs(&t1));
  EXPECT_EQ(t1, t0 + 2 * launch_ps);
}

TEST(ShimHostTime, MeasuredModeAddsTheHostsOwnTimeBetweenCallsTimesTheFactor) {
  setenv("CARDSIM_HOST_TIME", "measured:2", 1);
  auto p = startRuntime("mlu370-x8", 1);
  const uint64_t launch_ps = static_cast<uint64_t>(p.host.launch_overhead_s * 1e12 + 0.5);
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  ASSERT_SHIM_OK(shim::launchKernel(s, "a", memoryBound(64, 1), {}));
  uint64_t t0, t1;
  ASSERT_SHIM_OK(shim::hostTimePs(&t0));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));   // host work between two calls
  ASSERT_SHIM_OK(shim::launchKernel(s, "b", memoryBound(64, 1), {}));
  ASSERT_SHIM_OK(shim::hostTimePs(&t1));
  EXPECT_GE(t1 - t0, launch_ps + 2 * 20'000'000'000ull);   // 20 ms x 2
  // Time blocked in a synchronize is not host work.
  ASSERT_SHIM_OK(shim::streamSynchronize(s));
  uint64_t t2, t3;
  ASSERT_SHIM_OK(shim::hostTimePs(&t2));
  ASSERT_SHIM_OK(shim::launchKernel(s, "c", memoryBound(64, 1), {}));
  ASSERT_SHIM_OK(shim::hostTimePs(&t3));
  EXPECT_LT(t3 - t2, launch_ps + 2 * 5'000'000'000ull);   // well under 5 ms of real time x 2
}

TEST(ShimHostTime, TheModelledHostIgnoresRealTime) {
  unsetenv("CARDSIM_HOST_TIME");
  auto p = startRuntime("mlu370-x8", 1);
  const uint64_t launch_ps = static_cast<uint64_t>(p.host.launch_overhead_s * 1e12 + 0.5);
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  uint64_t t0, t1;
  ASSERT_SHIM_OK(shim::hostTimePs(&t0));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_SHIM_OK(shim::launchKernel(s, "a", memoryBound(64, 1), {}));
  ASSERT_SHIM_OK(shim::hostTimePs(&t1));
  EXPECT_EQ(t1 - t0, launch_ps);
}

TEST(ShimHostTime, ABadHostTimeModeIsNamed) {
  setenv("CARDSIM_HOST_TIME", "measured:fast", 1);
  shim::InitOptions o;
  o.backend = "sim";
  o.preset = "mlu370-x8";
  o.devices = 1;
  const shim::Status s = shim::initialize(o);
  EXPECT_EQ(s.code(), shim::Code::InitFailed);
  EXPECT_NE(s.message().find("CARDSIM_HOST_TIME"), std::string::npos) << s.toString();
  EXPECT_NE(s.message().find("measured:FACTOR"), std::string::npos) << s.toString();
}
