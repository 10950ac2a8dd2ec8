// Timing contracts: single operations against closed forms, contention between streams,
// events against the model's timeline, host clock, determinism.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "ShimTestUtil.h"
#include "simulator/Simulator.h"

namespace shim = cardsim::shim;
using namespace cardsim::testing;
using cardsim::model::DType;
using cardsim::model::KernelClass;

namespace {

constexpr double kTolerance = 0.02;  // the contracts: within 2% of the closed form

double linkBandwidth(const cardsim::model::DeviceParams& p) {
  return cardsim::model::pcieLaneBytesPerSecond(p.host_link.pcie_generation) * p.host_link.lanes *
         p.host_link.efficiency;
}
// Matrix units (GEMMs) and vector units (everything else).
double peak(const cardsim::model::DeviceParams& p, DType t) {
  return p.compute.peak_ops_per_s[static_cast<size_t>(t)];
}
double vectorPeak(const cardsim::model::DeviceParams& p, DType t) {
  return p.compute.vector_peak_ops_per_s[static_cast<size_t>(t)];
}
double eff(const cardsim::model::DeviceParams& p, KernelClass k) {
  return p.compute.efficiency[static_cast<size_t>(k)];
}

shim::KernelCost computeBound(double flops, uint32_t tiles) {
  shim::KernelCost c;
  c.kernel_class = shim::KernelClass::Gemm;
  c.dtype = shim::DataType::Float16;
  c.flops = flops;
  c.bytes_read = 1 << 20;
  c.bytes_written = 1 << 20;
  c.tiles = tiles;
  return c;
}

}  // namespace

TEST(ShimTiming, HostToDeviceCopyAloneIsLatencyPlusBytesOverLinkBandwidth) {
  auto p = startRuntime("mlu370-x8", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  const size_t bytes = 256ull << 20;
  void *dev, *pinned;
  ASSERT_SHIM_OK(shim::malloc(&dev, bytes));
  ASSERT_SHIM_OK(shim::hostMalloc(&pinned, bytes));
  ASSERT_SHIM_OK(shim::memcpy(dev, pinned, bytes, shim::MemcpyKind::HostToDevice));
  std::vector<uint8_t> pageable(bytes);
  ASSERT_SHIM_OK(shim::memcpy(dev, pageable.data(), bytes, shim::MemcpyKind::HostToDevice));
  auto acts = drain();
  ASSERT_EQ(acts.size(), 2u);
  const double expected = p.host_link.latency_s + bytes / linkBandwidth(p);
  EXPECT_NEAR(durationS(acts[0]), expected, kTolerance * expected);
  const double expected_pageable =
      p.host_link.latency_s + bytes / (linkBandwidth(p) * p.host_link.pageable_efficiency);
  EXPECT_NEAR(durationS(acts[1]), expected_pageable, kTolerance * expected_pageable);
}

TEST(ShimTiming, DeviceToHostAndDeviceToDeviceCopiesMatchClosedForms) {
  auto p = startRuntime("br100", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  const size_t bytes = 512ull << 20;
  void *a, *b, *pinned;
  ASSERT_SHIM_OK(shim::malloc(&a, bytes));
  ASSERT_SHIM_OK(shim::malloc(&b, bytes));
  ASSERT_SHIM_OK(shim::hostMalloc(&pinned, bytes));
  ASSERT_SHIM_OK(shim::memcpy(pinned, a, bytes, shim::MemcpyKind::DeviceToHost));
  ASSERT_SHIM_OK(shim::memcpy(b, a, bytes, shim::MemcpyKind::DeviceToDevice));
  auto acts = drain();
  ASSERT_EQ(acts.size(), 2u);
  const double d2h = p.host_link.latency_s + bytes / linkBandwidth(p);
  EXPECT_NEAR(durationS(acts[0]), d2h, kTolerance * d2h);
  // Device to device reads and writes the same memory.
  const double d2d = p.dma.d2d_latency_s + 2.0 * bytes / p.memory.bandwidth_bytes_per_s;
  EXPECT_NEAR(durationS(acts[1]), d2d, kTolerance * d2d);
}

TEST(ShimTiming, ComputeBoundKernelAloneMatchesRoofline) {
  auto p = startRuntime("mlu370-x8", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  const double flops = 1e12;
  bool ran = false;
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "gemm", computeBound(flops, p.compute.clusters * 4),
                                    [&] { ran = true; }));
  EXPECT_TRUE(ran);  // the functional body runs at launch
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  ASSERT_EQ(acts.size(), 1u);
  const double roofline = std::max(flops / (peak(p, DType::FP16) * eff(p, KernelClass::Gemm)),
                                   (2 << 20) / p.memory.bandwidth_bytes_per_s);
  const double expected = p.compute.dispatch_latency_s + p.memory.latency_s + roofline;
  EXPECT_NEAR(durationS(acts[0]), expected, kTolerance * expected);
  EXPECT_DOUBLE_EQ(acts[0].flops, flops);
}

TEST(ShimTiming, MemoryBoundKernelAloneMatchesRoofline) {
  auto p = startRuntime("br100", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  const double bytes = 2e9;
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "axpy", memoryBound(bytes, p.compute.clusters * 16), {}));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  ASSERT_EQ(acts.size(), 1u);
  const double roofline = std::max(bytes / p.memory.bandwidth_bytes_per_s,
                                   (bytes / 8) / (vectorPeak(p, DType::FP32) * eff(p, KernelClass::Elementwise)));
  const double expected = p.compute.dispatch_latency_s + p.memory.latency_s + roofline;
  EXPECT_NEAR(durationS(acts[0]), expected, kTolerance * expected);
}

TEST(ShimTiming, KernelWithPartialLastWaveCostsWholeWaves) {
  // 9 tiles on 8 clusters: two waves, the second with one tile.
  auto p = startRuntime("mlu370-x8", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  const uint32_t tiles = p.compute.clusters + 1;
  const double flops = 1e11;
  shim::KernelCost c = computeBound(flops, tiles);
  c.bytes_read = c.bytes_written = 0;
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "gemm", c, {}));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  // Each wave: a tile's work in whole cycles of the clock plus the per-wave overhead, after
  // the memory latency, the phase rounded up to whole cycles.
  const double f = p.compute.clock_hz;
  const double per_cluster = peak(p, DType::FP16) * eff(p, KernelClass::Gemm) / p.compute.clusters;
  const double wave_cycles = std::ceil(flops / tiles / (per_cluster / f)) + p.compute.wave_overhead_cycles;
  const double phase = std::ceil(p.memory.latency_s * f + wave_cycles - 1e-6) / f;
  const double expected = p.compute.dispatch_latency_s + 2 * phase;
  EXPECT_NEAR(durationS(acts.at(0)), expected, 1e-9);
}

TEST(ShimTiming, TwoMemoryBoundKernelsOnTwoStreamsOverlapAndShareBandwidth) {
  auto p = startRuntime("mlu370-x8", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  shim::Stream s1, s2;
  ASSERT_SHIM_OK(shim::streamCreate(&s1));
  ASSERT_SHIM_OK(shim::streamCreate(&s2));
  const double bytes = 1e9;
  const uint32_t half = p.compute.clusters / 2;
  ASSERT_SHIM_OK(shim::launchKernel(s1, "k1", memoryBound(bytes, half), {}));
  ASSERT_SHIM_OK(shim::launchKernel(s2, "k2", memoryBound(bytes, half), {}));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  auto k1 = named(acts, "k1").at(0), k2 = named(acts, "k2").at(0);
  const double alone = p.compute.dispatch_latency_s + p.memory.latency_s +
                       bytes / p.memory.bandwidth_bytes_per_s;
  const double span = seconds(std::max(k1.end_ps, k2.end_ps) - k1.start_ps);
  // They run at the same time (k2 starts before k1 ends) ...
  EXPECT_LT(k2.start_ps, k1.end_ps);
  // ... and contend: the pair takes longer than either alone, less than both in turn.
  EXPECT_GT(span, alone * 1.5);
  EXPECT_LT(span, 2 * alone);
  // The model's prediction: memory is work-conserving, so both finish after 2B/BW of traffic.
  const double predicted = p.compute.dispatch_latency_s + p.memory.latency_s +
                           2 * bytes / p.memory.bandwidth_bytes_per_s;
  EXPECT_NEAR(span, predicted, 0.01 * predicted);
}

TEST(ShimTiming, ComputeBoundAndMemoryBoundKernelsOverlapAlmostFully) {
  auto p = startRuntime("mlu370-x8", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  shim::Stream s1, s2;
  ASSERT_SHIM_OK(shim::streamCreate(&s1));
  ASSERT_SHIM_OK(shim::streamCreate(&s2));
  const uint32_t half = p.compute.clusters / 2;
  // Sized so that each alone takes about 10 ms.
  const double half_rate = peak(p, DType::FP16) * eff(p, KernelClass::Gemm) / 2;
  const double flops = 0.01 * half_rate;
  const double bytes = 0.01 * p.memory.bandwidth_bytes_per_s;
  ASSERT_SHIM_OK(shim::launchKernel(s1, "gemm", computeBound(flops, half), {}));
  ASSERT_SHIM_OK(shim::launchKernel(s2, "copyish", memoryBound(bytes, half), {}));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  auto g = named(acts, "gemm").at(0), m = named(acts, "copyish").at(0);
  const double span = seconds(std::max(g.end_ps, m.end_ps) - g.start_ps);
  const double sum = durationS(g) + durationS(m);
  const double longest = std::max(durationS(g), durationS(m));
  EXPECT_GE(span, longest);
  EXPECT_LT(span, 0.6 * sum);
}

TEST(ShimTiming, TwoHostToDeviceCopiesShareTheLinkButCopiesBothWaysDoNot) {
  auto p = startRuntime("mlu370-x8", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  const size_t bytes = 64ull << 20;
  void *d1, *d2, *h1, *h2;
  ASSERT_SHIM_OK(shim::malloc(&d1, bytes));
  ASSERT_SHIM_OK(shim::malloc(&d2, bytes));
  ASSERT_SHIM_OK(shim::hostMalloc(&h1, bytes));
  ASSERT_SHIM_OK(shim::hostMalloc(&h2, bytes));
  shim::Stream s1, s2;
  ASSERT_SHIM_OK(shim::streamCreate(&s1));
  ASSERT_SHIM_OK(shim::streamCreate(&s2));
  const double one = p.host_link.latency_s + bytes / linkBandwidth(p);

  ASSERT_SHIM_OK(shim::memcpyAsync(d1, h1, bytes, shim::MemcpyKind::HostToDevice, s1));
  ASSERT_SHIM_OK(shim::memcpyAsync(d2, h2, bytes, shim::MemcpyKind::HostToDevice, s2));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto same = drain();
  ASSERT_EQ(same.size(), 2u);
  const double span_same = seconds(std::max(same[0].end_ps, same[1].end_ps) -
                                   std::min(same[0].start_ps, same[1].start_ps));
  EXPECT_NEAR(span_same, p.host_link.latency_s + 2 * bytes / linkBandwidth(p), kTolerance * 2 * one);

  ASSERT_SHIM_OK(shim::memcpyAsync(d1, h1, bytes, shim::MemcpyKind::HostToDevice, s1));
  ASSERT_SHIM_OK(shim::memcpyAsync(h2, d2, bytes, shim::MemcpyKind::DeviceToHost, s2));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto both = drain();
  ASSERT_EQ(both.size(), 2u);
  const double span_both = seconds(std::max(both[0].end_ps, both[1].end_ps) -
                                   std::min(both[0].start_ps, both[1].start_ps));
  EXPECT_LT(span_both, 1.1 * one);  // full duplex: each direction has the whole link
}

TEST(ShimTiming, EventElapsedTimeEqualsTheModelTimeline) {
  auto p = startRuntime("mlu370-x8", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  shim::Event e1, e2;
  ASSERT_SHIM_OK(shim::eventCreate(&e1));
  ASSERT_SHIM_OK(shim::eventCreate(&e2));
  // A long first kernel keeps the stream busy, so e1, k and e2 follow back to back.
  ASSERT_SHIM_OK(shim::launchKernel(s, "gate", memoryBound(1e9, p.compute.clusters), {}));
  ASSERT_SHIM_OK(shim::eventRecord(e1, s));
  ASSERT_SHIM_OK(shim::launchKernel(s, "k", memoryBound(3e8, p.compute.clusters * 2), {}));
  ASSERT_SHIM_OK(shim::eventRecord(e2, s));
  float ms = -1;
  EXPECT_EQ(shim::eventElapsedTime(&ms, e1, e2).code(), shim::Code::NotReady);
  ASSERT_SHIM_OK(shim::eventSynchronize(e2));
  ASSERT_SHIM_OK(shim::eventElapsedTime(&ms, e1, e2));
  auto acts = drain();
  auto k = named(acts, "k").at(0);
  auto gate = named(acts, "gate").at(0);
  EXPECT_EQ(k.start_ps, gate.end_ps);
  EXPECT_NEAR(ms, durationS(k) * 1e3, 1e-5 * durationS(k) * 1e3);
  float back = 0;
  ASSERT_SHIM_OK(shim::eventElapsedTime(&back, e2, e1));
  EXPECT_FLOAT_EQ(back, -ms);
}

TEST(ShimTiming, HostClockAdvancesByCallOverheadsAndSyncMovesItToCompletion) {
  auto p = startRuntime("mlu370-x8", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  uint64_t t0 = 0, t1 = 0, t2 = 0;
  ASSERT_SHIM_OK(shim::hostTimePs(&t0));
  for (int i = 0; i < 10; ++i)
    ASSERT_SHIM_OK(shim::launchKernel(nullptr, "k", memoryBound(1e8, 8), {}));
  ASSERT_SHIM_OK(shim::hostTimePs(&t1));
  EXPECT_EQ(t1 - t0, 10 * cardsim::model::secondsToPs(p.host.launch_overhead_s));
  ASSERT_SHIM_OK(shim::streamSynchronize(nullptr));
  ASSERT_SHIM_OK(shim::hostTimePs(&t2));
  auto acts = drain();
  ASSERT_EQ(acts.size(), 10u);
  // The launches queued back to back: each starts when the previous ends.
  for (size_t i = 1; i < acts.size(); ++i) EXPECT_EQ(acts[i].start_ps, acts[i - 1].end_ps);
  EXPECT_EQ(t2, std::max(acts.back().end_ps, t1 + cardsim::model::secondsToPs(p.host.sync_overhead_s)));
}

TEST(ShimTiming, ASynchronizeWithNothingLeftMeetsLaterWorkWhereItsRunWouldHaveEnded) {
  // A synchronize whose work has all completed is answered without running the simulation
  // (its answer is the caller's own time); the run it stands in for still happens before any
  // later command, so a command another thread submits from behind that time starts at it,
  // as it would have had the simulation run there at once.
  auto p = startRuntime("mlu370-x8", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  shim::Stream a, b;
  ASSERT_SHIM_OK(shim::streamCreate(&a));
  ASSERT_SHIM_OK(shim::streamCreate(&b));
  std::mutex m;
  std::condition_variable cv;
  int stage = 0;
  uint64_t behind_ps = 0;
  std::thread other([&] {
    // This thread's clock starts now and stays behind while the main thread moves on.
    EXPECT_SHIM_OK(shim::launchKernel(b, "early", memoryBound(1e6, 1), {}));
    EXPECT_SHIM_OK(shim::streamSynchronize(b));
    EXPECT_SHIM_OK(shim::hostTimePs(&behind_ps));
    std::unique_lock<std::mutex> lock(m);
    stage = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return stage == 2; });
    lock.unlock();
    EXPECT_SHIM_OK(shim::launchKernel(b, "late", memoryBound(1e6, 1), {}));
    EXPECT_SHIM_OK(shim::streamSynchronize(b));
  });
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return stage == 1; });
  }
  ASSERT_SHIM_OK(shim::launchKernel(a, "k", memoryBound(1e8, p.compute.clusters), {}));
  ASSERT_SHIM_OK(shim::streamSynchronize(a));   // runs the simulation to k's end
  uint64_t t = 0;
  ASSERT_SHIM_OK(shim::hostTimePs(&t));
  ASSERT_SHIM_OK(shim::hostClockJoin(t + 1000000000));   // 1 ms of host work
  ASSERT_SHIM_OK(shim::streamSynchronize(a));   // nothing left on a: answered at once
  uint64_t waited = 0;
  ASSERT_SHIM_OK(shim::hostTimePs(&waited));
  EXPECT_EQ(waited, t + 1000000000 + cardsim::model::secondsToPs(p.host.sync_overhead_s));
  {
    std::lock_guard<std::mutex> lock(m);
    stage = 2;
  }
  cv.notify_all();
  other.join();
  auto acts = drain();
  const auto k = named(acts, "k").at(0);
  const auto late = named(acts, "late").at(0);
  ASSERT_LT(late.submit_ps, waited);   // submitted from behind the synchronize's time
  ASSERT_GT(behind_ps, 0u);
  EXPECT_LT(k.end_ps, waited);
  EXPECT_EQ(late.start_ps, waited + 1);   // where the synchronize's run would have ended
}

namespace {

// One program whose timeline must not depend on host speed or scheduling.
std::string runProgramForTimeline(bool jitter) {
  startRuntime("mlu370-x8", 2);
  std::string errors;
  auto ok = [&](const shim::Status& st) {
    if (!st.ok()) errors += st.toString() + "\n";
  };
  ok(shim::setActivityRecording(true));
  std::mt19937 rng(42);
  std::atomic<bool> stop{false};
  std::thread noise([&] {  // competes for the CPU while the program runs
    volatile double x = 0;
    while (!stop) x = x + 1;
  });
  auto pause = [&] {
    if (jitter) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
  };
  shim::Stream a, b;
  ok(shim::streamCreate(&a));
  ok(shim::streamCreate(&b, 0));
  shim::Event e;
  ok(shim::eventCreate(&e));
  void *d, *h;
  ok(shim::malloc(&d, 8 << 20));
  ok(shim::hostMalloc(&h, 8 << 20));
  for (int i = 0; i < 20; ++i) {
    pause();
    ok(shim::memcpyAsync(d, h, (1 + i % 4) << 20, shim::MemcpyKind::HostToDevice, a));
    ok(shim::launchKernel(a, "ka", memoryBound(1e7 * (1 + i % 3), 4), {}));
    pause();
    ok(shim::launchKernel(b, "kb", computeBound(1e9, 4), {}));
    if (i % 5 == 0) {
      ok(shim::eventRecord(e, a));
      ok(shim::streamWaitEvent(b, e));
    }
    if (i % 7 == 0) (void)shim::streamQuery(b);  // NotReady is expected
  }
  ok(shim::setDevice(1));
  ok(shim::launchKernel(nullptr, "other-device", memoryBound(1e8, 8), {}));
  ok(shim::setDevice(0));
  ok(shim::deviceSynchronize());
  stop = true;
  noise.join();
  std::ostringstream out;
  std::vector<shim::ActivityRecord> acts;
  ok(shim::drainActivities(&acts));
  for (const auto& r : acts)
    out << r.device << ' ' << r.stream_id << ' ' << r.name << ' ' << r.submit_ps << ' '
        << r.start_ps << ' ' << r.end_ps << '\n';
  uint64_t host = 0;
  ok(shim::hostTimePs(&host));
  out << "host " << host << '\n' << errors;
  return out.str();
}

// Runs `body` in a forked child (a process of its own: one simulator per process) with
// CARDSIM_SIM_DRIVER set to `driver` when given; returns what it returned.
template <typename Body>
std::string inChildRun(Body body, const char* driver) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (driver) setenv("CARDSIM_SIM_DRIVER", driver, 1);
    std::string s;
    try {
      s = body();
    } catch (const std::exception& e) {
      s = std::string("exception: ") + e.what();
    }
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = write(fds[1], s.data() + off, s.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return s;
}

std::string inChild(bool jitter, const char* driver = nullptr) {
  return inChildRun([jitter] { return runProgramForTimeline(jitter); }, driver);
}

}  // namespace

TEST(ShimTiming, AnAnsweredCollectivesEndIsPassedOnlyForACallThatNeedsItAndMovesUntilThen) {
  // A collective's end as the fabric server answered it can still move later (a collective
  // answered after it shares its links) until the simulation is let past it, which only a
  // call that needs what lies behind it does: queued commands alone, however far ahead the
  // host is, stop the simulation there. Once passed (sealed), the end stays put.
  using namespace cardsim::model;
  auto p = startRuntime("mlu370-x8", 1);
  cardsim::sim::Simulator& sim = *cardsim::sim::Simulator::running();
  sim.setRecording(true);
  (void)sim.drainActivities();
  const DeviceId dev{0};
  const TimePs end_ps = sim.hostNow() + 1'000'000'000;   // 1 ms from now
  auto end = std::make_shared<CollectiveEnd>();
  end->end_ps.store(end_ps);
  Command c;
  c.kind = CommandKind::Collective;
  c.end = end;
  sim.holdCollectiveEnd("g", 0, end);
  const QueuePoint collective = sim.submit(dev, QueueId{0}, c, 0);
  // The host 3 ms further on queues enough commands for the simulation to run them
  // (more than an intake batch), all ready after the collective's end.
  sim.hostAdvance(3e-3);
  for (int i = 0; i < 1500; ++i) {
    Command k;
    k.kind = CommandKind::EventRecord;
    (void)sim.submit(dev, QueueId{1}, k, 0);
  }
  EXPECT_LT(sim.sealedPs(), end_ps);
  sim.moveCollectiveEnd("g", 0, end_ps + 500'000'000);   // still movable
  EXPECT_EQ(end->end_ps.load(), end_ps + 500'000'000);
  sim.moveCollectiveEnd("g", 0, end_ps + 100'000'000);   // never earlier
  EXPECT_EQ(end->end_ps.load(), end_ps + 500'000'000);
  (void)sim.waitFor({collective}, 0);                   // needs it: passed, sealed
  EXPECT_GE(sim.sealedPs(), end_ps + 500'000'000);
  sim.moveCollectiveEnd("g", 0, end_ps + 900'000'000);   // too late: it completed
  EXPECT_EQ(end->end_ps.load(), end_ps + 500'000'000);
  TimePs completed_at = 0;
  for (const cardsim::sim::Activity& a : sim.drainActivities())
    if (a.kind == CommandKind::Collective) completed_at = a.end_ps;
  EXPECT_EQ(completed_at, end_ps + 500'000'000);
  sim.setRecording(false);
}

TEST(ShimTiming, SameProgramGivesIdenticalTimelineWhateverTheHostSpeed) {
  if (cardsim::sim::Simulator::running())
    GTEST_SKIP() << "needs a process without a simulator (ctest runs each test alone)";
  const std::string fast = inChild(false);
  const std::string slow = inChild(true);
  EXPECT_GT(std::count(fast.begin(), fast.end(), '\n'), 60);
  EXPECT_EQ(fast, slow);
}

TEST(ShimTiming, CallerDrivenSimulationGivesTheSameTimeline) {
  // CARDSIM_SIM_DRIVER=caller: the host threads (here the program's and a noise thread
  // querying concurrently) run the simulation themselves instead of a simulation thread.
  if (cardsim::sim::Simulator::running())
    GTEST_SKIP() << "needs a process without a simulator (ctest runs each test alone)";
  const std::string threaded = inChild(true, "thread");
  const std::string caller = inChild(true, "caller");
  EXPECT_GT(std::count(threaded.begin(), threaded.end(), '\n'), 60);
  EXPECT_EQ(threaded, caller);
  EXPECT_EQ(inChild(false, "caller"), caller);
  const std::string bad = inChild(false, "fibre");
  EXPECT_NE(bad.find("CARDSIM_SIM_DRIVER"), std::string::npos) << bad;
}

namespace {

// Eight host threads, each on its own stream, at once; returns what went wrong ("" if nothing).
std::string manyHostThreadsOnTheirOwnStreams() {
  auto p = startRuntime("mlu370-x8", 2);
  std::string problems;
  auto check = [&](const shim::Status& st) {
    if (!st.ok()) problems += st.toString() + "\n";
  };
  check(shim::setActivityRecording(true));
  constexpr int kThreads = 8, kIters = 100;
  constexpr size_t kFloats = 1024;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  std::vector<uint32_t> stream_ids(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto ok = [&](shim::Status s) {
        if (!s.ok()) failures++;
      };
      ok(shim::setDevice(t % 2));
      shim::Stream s;
      ok(shim::streamCreate(&s));
      ok(shim::streamGetId(s, &stream_ids[t]));
      float* d = nullptr;
      ok(shim::malloc(reinterpret_cast<void**>(&d), kFloats * sizeof(float)));
      std::vector<float> h(kFloats, static_cast<float>(t));
      ok(shim::memcpyAsync(d, h.data(), kFloats * sizeof(float), shim::MemcpyKind::HostToDevice, s));
      for (int i = 0; i < kIters; ++i)
        ok(shim::launchKernel(s, "inc", memoryBound(8 * kFloats, 1), [&] {
          for (size_t j = 0; j < kFloats; ++j) d[j] += 1.0f;
        }));
      ok(shim::memcpy(h.data(), d, kFloats * sizeof(float), shim::MemcpyKind::DeviceToHost));
      ok(shim::streamSynchronize(s));
      for (float v : h)
        if (v != static_cast<float>(t + kIters)) failures++;
    });
  }
  for (auto& th : threads) th.join();
  if (failures.load() != 0) problems += std::to_string(failures.load()) + " failed calls or wrong values\n";
  for (int d = 0; d < 2; ++d) {
    check(shim::setDevice(d));
    check(shim::deviceSynchronize());
  }
  auto acts = drain();
  if (named(acts, "inc").size() != static_cast<size_t>(kThreads * kIters))
    problems += std::to_string(named(acts, "inc").size()) + " kernels ran\n";
  for (int t = 0; t < kThreads; ++t) {
    uint64_t last_end = 0;
    int count = 0;
    for (const auto& a : acts) {
      if (a.stream_id != stream_ids[t] || a.name != "inc") continue;
      if (a.start_ps < last_end)  // in order, never overlapping within a stream
        problems += "stream " + std::to_string(t) + ": a kernel overlaps the one before\n";
      last_end = a.end_ps;
      ++count;
    }
    if (count != kIters) problems += "stream " + std::to_string(t) + ": " + std::to_string(count) + " kernels\n";
  }
  return problems;
}

}  // namespace

TEST(ShimTiming, ManyHostThreadsOnTheirOwnStreams) { EXPECT_EQ(manyHostThreadsOnTheirOwnStreams(), ""); }

TEST(ShimTiming, ManyHostThreadsDrivingTheSimulationThemselves) {
  // CARDSIM_SIM_DRIVER=caller with eight threads asking at once: one runs the simulation
  // at a time and answers the others.
  if (cardsim::sim::Simulator::running())
    GTEST_SKIP() << "needs a process without a simulator (ctest runs each test alone)";
  EXPECT_EQ(inChildRun(manyHostThreadsOnTheirOwnStreams, "caller"), "");
}

TEST(ShimTiming, WorkThatWouldPassTheSimulationsEndFailsAsTimeOverflow) {
  // A cost far outside the card's range (about 10^16 s of GEMM): the wait would pass 2^63 ps.
  // The runtime names it, with its own code (the configuration's fault, not a model bug).
  startRuntime("mlu370-x8", 1);
  shim::KernelCost c = computeBound(1e30, 8);
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "gemm", c, {}));
  const shim::Status s = shim::deviceSynchronize();
  EXPECT_EQ(s.code(), shim::Code::TimeOverflow) << s.toString();
  EXPECT_NE(s.message().find("simulated time overflow"), std::string::npos) << s.toString();
  // The simulation cannot resume after that: later calls fail the same way, not hang.
  const shim::Status again = shim::deviceSynchronize();
  EXPECT_EQ(again.code(), shim::Code::TimeOverflow) << again.toString();
}
