// Stream capture and graph replay.
#include <thread>

#include "ShimTestUtil.h"
#include "device_models/Command.h"

namespace shim = cardsim::shim;
using namespace cardsim::testing;

TEST(ShimGraphs, CaptureRecordsWithoutRunningAndEachLaunchReplaysInOrder) {
  startRuntime("mlu370-x8", 1);
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  int* d = nullptr;
  ASSERT_SHIM_OK(shim::malloc(reinterpret_cast<void**>(&d), 16 * sizeof(int)));
  std::vector<int> host(16, 0);
  std::vector<std::string> order;

  ASSERT_SHIM_OK(shim::streamBeginCapture(s));
  bool capturing = false;
  ASSERT_SHIM_OK(shim::streamIsCapturing(s, &capturing));
  EXPECT_TRUE(capturing);
  ASSERT_SHIM_OK(shim::memsetAsync(d, 0, 16 * sizeof(int), s));
  ASSERT_SHIM_OK(shim::launchKernel(s, "add1", memoryBound(64, 1), [&] {
    order.push_back("add1");
    for (int i = 0; i < 16; ++i) d[i] += 1;
  }));
  ASSERT_SHIM_OK(shim::launchKernel(s, "times3", memoryBound(64, 1), [&] {
    order.push_back("times3");
    for (int i = 0; i < 16; ++i) d[i] *= 3;
  }));
  ASSERT_SHIM_OK(shim::memcpyAsync(host.data(), d, 16 * sizeof(int), shim::MemcpyKind::DeviceToHost, s));
  shim::Graph g = nullptr;
  ASSERT_SHIM_OK(shim::streamEndCapture(s, &g));
  EXPECT_TRUE(order.empty());                 // nothing ran while capturing
  EXPECT_EQ(host, std::vector<int>(16, 0));
  size_t nodes = 0;
  ASSERT_SHIM_OK(shim::graphNodeCount(g, &nodes));
  EXPECT_EQ(nodes, 4u);

  for (int launch = 0; launch < 2; ++launch) {
    ASSERT_SHIM_OK(shim::graphLaunch(g, s));
    ASSERT_SHIM_OK(shim::streamSynchronize(s));
    EXPECT_EQ(host, std::vector<int>(16, 3));  // memset, +1, *3, copied back
  }
  EXPECT_EQ(order, (std::vector<std::string>{"add1", "times3", "add1", "times3"}));
  ASSERT_SHIM_OK(shim::graphDestroy(g));
  EXPECT_EQ(shim::graphLaunch(g, s).code(), shim::Code::InvalidHandle);
}

TEST(ShimGraphs, AGraphLaunchCostsOneHostLaunchAndTheGraphDispatchLatency) {
  auto p = startRuntime("mlu370-x8", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  constexpr int kKernels = 5;
  ASSERT_SHIM_OK(shim::streamBeginCapture(s));
  for (int i = 0; i < kKernels; ++i) ASSERT_SHIM_OK(shim::launchKernel(s, "g", memoryBound(1e6, 1), {}));
  shim::Graph g;
  ASSERT_SHIM_OK(shim::streamEndCapture(s, &g));

  uint64_t t0, t1;
  ASSERT_SHIM_OK(shim::hostTimePs(&t0));
  ASSERT_SHIM_OK(shim::graphLaunch(g, s));
  ASSERT_SHIM_OK(shim::hostTimePs(&t1));
  using cardsim::model::secondsToPs;
  EXPECT_EQ(t1 - t0, secondsToPs(p.host.launch_overhead_s) + (kKernels - 1) * secondsToPs(1e-9));
  ASSERT_SHIM_OK(shim::streamSynchronize(s));
  for (int i = 0; i < kKernels; ++i) ASSERT_SHIM_OK(shim::launchKernel(s, "plain", memoryBound(1e6, 1), {}));
  ASSERT_SHIM_OK(shim::streamSynchronize(s));
  auto acts = drain();
  auto in_graph = named(acts, "g"), plain = named(acts, "plain");
  ASSERT_EQ(in_graph.size(), static_cast<size_t>(kKernels));
  ASSERT_EQ(plain.size(), static_cast<size_t>(kKernels));
  const double saved = p.compute.dispatch_latency_s - p.compute.graph_dispatch_latency_s;
  EXPECT_GT(saved, 0);
  EXPECT_NEAR(durationS(plain[0]) - durationS(in_graph[0]), saved, 1e-12);
}

TEST(ShimGraphs, SynchronizingACapturingStreamInvalidatesTheCapture) {
  startRuntime("mlu370-x8", 1);
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  ASSERT_SHIM_OK(shim::streamBeginCapture(s));
  ASSERT_SHIM_OK(shim::launchKernel(s, "k", memoryBound(64, 1), {}));
  shim::Status st = shim::streamSynchronize(s);
  EXPECT_EQ(st.code(), shim::Code::NotSupported);
  EXPECT_NE(st.message().find("capturing"), std::string::npos) << st.message();
  shim::Graph g = nullptr;
  st = shim::streamEndCapture(s, &g);
  EXPECT_EQ(st.code(), shim::Code::InvalidValue);
  EXPECT_NE(st.message().find("invalidated by streamSynchronize"), std::string::npos) << st.message();
  EXPECT_EQ(g, nullptr);
  // The stream works normally afterwards.
  int ran = 0;
  ASSERT_SHIM_OK(shim::launchKernel(s, "k", memoryBound(64, 1), [&] { ran = 1; }));
  ASSERT_SHIM_OK(shim::streamSynchronize(s));
  EXPECT_EQ(ran, 1);
  // Synchronizing the device, or a synchronous copy, during capture is illegal as well.
  ASSERT_SHIM_OK(shim::streamBeginCapture(s));
  EXPECT_EQ(shim::deviceSynchronize().code(), shim::Code::NotSupported);
  EXPECT_EQ(shim::streamEndCapture(s, &g).code(), shim::Code::InvalidValue);
  int* d = nullptr;
  ASSERT_SHIM_OK(shim::malloc(reinterpret_cast<void**>(&d), 64));
  int h[16] = {};
  // memcpy() runs on the default stream, which is not capturing: a relaxed capture allows it,
  // a global one does not (a potentially unsafe call) and is invalidated.
  ASSERT_SHIM_OK(shim::streamBeginCapture(s, shim::CaptureMode::Relaxed));
  ASSERT_SHIM_OK(shim::memcpy(h, d, 64, shim::MemcpyKind::DeviceToHost));
  ASSERT_SHIM_OK(shim::streamEndCapture(s, &g));
  ASSERT_SHIM_OK(shim::streamBeginCapture(s));
  const shim::Status unsafe = shim::memcpy(h, d, 64, shim::MemcpyKind::DeviceToHost);
  EXPECT_EQ(unsafe.code(), shim::Code::NotSupported);
  EXPECT_NE(unsafe.message().find("global mode"), std::string::npos) << unsafe.toString();
  EXPECT_EQ(shim::streamEndCapture(s, &g).code(), shim::Code::InvalidValue);
}

// Capture modes (shim.h): which threads' potentially unsafe calls a capture prohibits.
TEST(ShimGraphs, CaptureModesProhibitUnsafeCallsOnTheThreadsTheyCover) {
  startRuntime("mlu370-x8", 1);
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  auto mallocOnOtherThread = [] {
    shim::Code code = shim::Code::Internal;
    std::thread t([&] {
      ASSERT_SHIM_OK(shim::setDevice(0));
      void* p = nullptr;
      code = shim::malloc(&p, 256).code();
      if (p) (void)shim::free(p);
    });
    t.join();
    return code;
  };
  shim::Graph g;
  for (auto mode : {shim::CaptureMode::Global, shim::CaptureMode::ThreadLocal, shim::CaptureMode::Relaxed}) {
    SCOPED_TRACE(shim::captureModeName(mode));
    // Another thread: only a global capture prohibits its calls.
    ASSERT_SHIM_OK(shim::streamBeginCapture(s, mode));
    const bool other_prohibited = mode == shim::CaptureMode::Global;
    EXPECT_EQ(mallocOnOtherThread(), other_prohibited ? shim::Code::NotSupported : shim::Code::Success);
    EXPECT_EQ(shim::streamEndCapture(s, &g).code(), other_prohibited ? shim::Code::InvalidValue : shim::Code::Success);
    // This thread: global and thread_local captures prohibit its calls, unless it is relaxed.
    ASSERT_SHIM_OK(shim::streamBeginCapture(s, mode));
    void* p = nullptr;
    const bool own_prohibited = mode != shim::CaptureMode::Relaxed;
    EXPECT_EQ(shim::malloc(&p, 256).code(), own_prohibited ? shim::Code::NotSupported : shim::Code::Success);
    if (p) ASSERT_SHIM_OK(shim::free(p));
    p = nullptr;
    (void)shim::streamEndCapture(s, &g);
    ASSERT_SHIM_OK(shim::streamBeginCapture(s, mode));
    shim::CaptureMode mine = shim::CaptureMode::Relaxed;
    ASSERT_SHIM_OK(shim::threadExchangeCaptureMode(&mine));
    EXPECT_EQ(mine, shim::CaptureMode::Global);   // the default
    ASSERT_SHIM_OK(shim::malloc(&p, 256));          // exempt
    ASSERT_SHIM_OK(shim::free(p));
    ASSERT_SHIM_OK(shim::threadExchangeCaptureMode(&mine));
    ASSERT_SHIM_OK(shim::streamEndCapture(s, &g));
  }
}

TEST(ShimGraphs, CaptureErrorsAreNamed) {
  startRuntime("mlu370-x8", 1);
  EXPECT_EQ(shim::streamBeginCapture(nullptr).code(), shim::Code::InvalidValue);
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  shim::Graph g;
  shim::Status st = shim::streamEndCapture(s, &g);
  EXPECT_EQ(st.code(), shim::Code::InvalidValue);
  EXPECT_NE(st.message().find("not capturing"), std::string::npos);
  ASSERT_SHIM_OK(shim::streamBeginCapture(s));
  EXPECT_EQ(shim::streamBeginCapture(s).code(), shim::Code::InvalidValue);
  // A synchronization inside the capture invalidates it.
  EXPECT_EQ(shim::streamSynchronize(s).code(), shim::Code::NotSupported);
  st = shim::streamEndCapture(s, &g);
  EXPECT_EQ(st.code(), shim::Code::InvalidValue);
  EXPECT_NE(st.message().find("streamSynchronize"), std::string::npos) << st.message();
}

TEST(ShimGraphs, EventsInsideACaptureOrderItsWorkForkJoinAndReplay) {
  startRuntime("mlu370-x8", 1);
  shim::Stream s, side;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  ASSERT_SHIM_OK(shim::streamCreate(&side));
  shim::Event fork, join, outside;
  ASSERT_SHIM_OK(shim::eventCreate(&fork));
  ASSERT_SHIM_OK(shim::eventCreate(&join));
  ASSERT_SHIM_OK(shim::eventCreate(&outside));
  ASSERT_SHIM_OK(shim::eventRecord(outside, side));       // work outside the capture
  ASSERT_SHIM_OK(shim::streamBeginCapture(s));
  ASSERT_SHIM_OK(shim::launchKernel(s, "first", memoryBound(1 << 20, 4), nullptr));
  ASSERT_SHIM_OK(shim::eventRecord(fork, s));             // a marker, not a command
  ASSERT_SHIM_OK(shim::streamWaitEvent(s, fork));         // ordered by the capture itself
  ASSERT_SHIM_OK(shim::streamWaitEvent(s, outside));      // not part of the graph
  {
    shim::CaptureMode relaxed = shim::CaptureMode::Relaxed;   // a query is unsafe in a global capture
    ASSERT_SHIM_OK(shim::threadExchangeCaptureMode(&relaxed));
    ASSERT_SHIM_OK(shim::eventQuery(fork));                   // not recorded outside the capture
    ASSERT_SHIM_OK(shim::threadExchangeCaptureMode(&relaxed));
  }
  // Fork: the side stream waits on the capture's event and joins it.
  ASSERT_SHIM_OK(shim::streamWaitEvent(side, fork));
  bool capturing = false;
  ASSERT_SHIM_OK(shim::streamIsCapturing(side, &capturing));
  EXPECT_TRUE(capturing);
  ASSERT_SHIM_OK(shim::launchKernel(side, "on side", memoryBound(1 << 20, 4), nullptr));
  ASSERT_SHIM_OK(shim::eventRecord(join, side));
  shim::Graph g;
  // Ending now would leave the side stream's work unjoined.
  // Join: the origin waits on the side stream's event; the side stream leaves the capture.
  ASSERT_SHIM_OK(shim::streamWaitEvent(s, join));
  ASSERT_SHIM_OK(shim::streamIsCapturing(side, &capturing));
  EXPECT_FALSE(capturing);
  ASSERT_SHIM_OK(shim::launchKernel(s, "second", memoryBound(1 << 20, 4), nullptr));
  shim::Graph bad;
  EXPECT_EQ(shim::streamEndCapture(side, &bad).code(), shim::Code::InvalidValue);   // not its capture
  ASSERT_SHIM_OK(shim::streamEndCapture(s, &g));
  std::size_t nodes = 0;
  ASSERT_SHIM_OK(shim::graphNodeCount(g, &nodes));
  EXPECT_EQ(nodes, 3u);                                   // the three kernels
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  ASSERT_SHIM_OK(shim::graphLaunch(g, s));
  ASSERT_SHIM_OK(shim::streamSynchronize(s));
  const auto acts = drain();
  const auto first = named(acts, "first"), mid = named(acts, "on side"), second = named(acts, "second");
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(mid.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_GE(mid[0].start_ps, first[0].end_ps);            // replayed in capture order
  EXPECT_GE(second[0].start_ps, mid[0].end_ps);
  // Recorded again outside a capture, the event is an ordinary one.
  ASSERT_SHIM_OK(shim::eventRecord(fork, s));
  ASSERT_SHIM_OK(shim::streamWaitEvent(side, fork));
  ASSERT_SHIM_OK(shim::streamIsCapturing(side, &capturing));
  EXPECT_FALSE(capturing);
}

// Branches forked inside a capture overlap at replay as they did when queued eagerly: the
// side stream's work replays on a lane of its own, after the fork and before the join.
TEST(ShimGraphs, ForkedBranchesReplayConcurrentlyBetweenForkAndJoin) {
  startRuntime("mlu370-x8", 1);
  shim::Stream s, side;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  ASSERT_SHIM_OK(shim::streamCreate(&side));
  shim::Event fork, join;
  ASSERT_SHIM_OK(shim::eventCreate(&fork));
  ASSERT_SHIM_OK(shim::eventCreate(&join));
  // Compute-bound kernels of a few tiles each: two fit on the card side by side.
  shim::KernelCost k;
  k.kernel_class = shim::KernelClass::Gemm;
  k.flops = 2e9;
  k.tiles = 2;
  auto queue = [&](const char* suffix) {
    ASSERT_SHIM_OK(shim::launchKernel(s, std::string("first") + suffix, k, nullptr));
    ASSERT_SHIM_OK(shim::eventRecord(fork, s));
    ASSERT_SHIM_OK(shim::streamWaitEvent(side, fork));
    ASSERT_SHIM_OK(shim::launchKernel(side, std::string("branch") + suffix, k, nullptr));
    ASSERT_SHIM_OK(shim::launchKernel(s, std::string("main") + suffix, k, nullptr));
    ASSERT_SHIM_OK(shim::eventRecord(join, side));
    ASSERT_SHIM_OK(shim::streamWaitEvent(s, join));
    ASSERT_SHIM_OK(shim::launchKernel(s, std::string("last") + suffix, k, nullptr));
  };
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  queue(" eager");
  ASSERT_SHIM_OK(shim::streamSynchronize(s));
  ASSERT_SHIM_OK(shim::streamBeginCapture(s));
  queue(" graph");
  shim::Graph g;
  ASSERT_SHIM_OK(shim::streamEndCapture(s, &g));
  std::size_t nodes = 0;
  ASSERT_SHIM_OK(shim::graphNodeCount(g, &nodes));
  EXPECT_EQ(nodes, 4u);   // the kernels; the events are edges
  ASSERT_SHIM_OK(shim::graphLaunch(g, s));
  ASSERT_SHIM_OK(shim::streamSynchronize(s));
  const auto acts = drain();
  for (const char* suffix : {" eager", " graph"}) {
    SCOPED_TRACE(suffix);
    auto one = [&](const char* name) {
      const auto v = named(acts, std::string(name) + suffix);
      EXPECT_EQ(v.size(), 1u);
      return v.empty() ? shim::ActivityRecord{} : v[0];
    };
    const auto first = one("first"), branch = one("branch"), main = one("main"), last = one("last");
    EXPECT_GE(branch.start_ps, first.end_ps);                     // after the fork
    EXPECT_LT(branch.start_ps, main.end_ps);                      // the two branches overlap
    EXPECT_LT(main.start_ps, branch.end_ps);
    EXPECT_GE(last.start_ps, std::max(branch.end_ps, main.end_ps));   // after the join
  }
}

TEST(ShimGraphs, AForkedStreamNotJoinedBackInvalidatesTheCapture) {
  startRuntime("mlu370-x8", 1);
  shim::Stream s, side;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  ASSERT_SHIM_OK(shim::streamCreate(&side));
  shim::Event fork;
  ASSERT_SHIM_OK(shim::eventCreate(&fork));
  ASSERT_SHIM_OK(shim::streamBeginCapture(s));
  ASSERT_SHIM_OK(shim::eventRecord(fork, s));
  ASSERT_SHIM_OK(shim::streamWaitEvent(side, fork));
  ASSERT_SHIM_OK(shim::launchKernel(side, "on side", memoryBound(1 << 20, 4), nullptr));
  shim::Graph g;
  const shim::Status st = shim::streamEndCapture(s, &g);
  EXPECT_EQ(st.code(), shim::Code::InvalidValue);
  EXPECT_NE(st.message().find("not joined back"), std::string::npos) << st.message();
  bool capturing = true;
  ASSERT_SHIM_OK(shim::streamIsCapturing(side, &capturing));
  EXPECT_FALSE(capturing);                                // both streams usable again
  ASSERT_SHIM_OK(shim::launchKernel(side, "after", memoryBound(1 << 20, 4), nullptr));
  ASSERT_SHIM_OK(shim::streamSynchronize(side));
  // A joined stream that synchronizes breaks the whole capture, reported at its end.
  ASSERT_SHIM_OK(shim::streamBeginCapture(s));
  ASSERT_SHIM_OK(shim::eventRecord(fork, s));
  ASSERT_SHIM_OK(shim::streamWaitEvent(side, fork));
  EXPECT_EQ(shim::streamSynchronize(side).code(), shim::Code::NotSupported);
  const shim::Status end = shim::streamEndCapture(s, &g);
  EXPECT_EQ(end.code(), shim::Code::InvalidValue);
  EXPECT_NE(end.message().find("joined stream"), std::string::npos) << end.message();
}
