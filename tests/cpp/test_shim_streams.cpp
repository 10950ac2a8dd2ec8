// Streams, events, priorities and hardware-queue sharing.
#include "ShimTestUtil.h"

namespace shim = cardsim::shim;
using namespace cardsim::testing;

TEST(ShimStreams, QueryIsNotReadyWhileWorkIsPendingThenSuccess) {
  startRuntime("mlu370-x8", 1);
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  ASSERT_SHIM_OK(shim::streamQuery(s));  // idle
  ASSERT_SHIM_OK(shim::launchKernel(s, "long", memoryBound(3e9, 8), {}));   // ~10 ms
  shim::Status q = shim::streamQuery(s);
  EXPECT_EQ(q.code(), shim::Code::NotReady);
  EXPECT_TRUE(shim::getLastError().ok());  // NotReady is not an error
  ASSERT_SHIM_OK(shim::streamSynchronize(s));
  ASSERT_SHIM_OK(shim::streamQuery(s));
}

TEST(ShimStreams, EventWaitOrdersWorkAcrossStreamsAndDevices) {
  startRuntime("mlu370-x8", 2);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  shim::Stream producer, consumer;
  ASSERT_SHIM_OK(shim::streamCreate(&producer));
  ASSERT_SHIM_OK(shim::setDevice(1));
  ASSERT_SHIM_OK(shim::streamCreate(&consumer));
  ASSERT_SHIM_OK(shim::setDevice(0));
  shim::Event ready;
  ASSERT_SHIM_OK(shim::eventCreate(&ready, shim::kEventDisableTiming));
  ASSERT_SHIM_OK(shim::launchKernel(producer, "produce", memoryBound(1e9, 8), {}));
  ASSERT_SHIM_OK(shim::eventRecord(ready, producer));
  ASSERT_SHIM_OK(shim::streamWaitEvent(consumer, ready));
  ASSERT_SHIM_OK(shim::launchKernel(consumer, "consume", memoryBound(1e6, 8), {}));
  ASSERT_SHIM_OK(shim::streamSynchronize(consumer));
  auto acts = drain();
  auto prod = named(acts, "produce").at(0), cons = named(acts, "consume").at(0);
  EXPECT_EQ(cons.device, 1);
  EXPECT_GE(cons.start_ps, prod.end_ps);
  // Timing is disabled on that event.
  float ms;
  EXPECT_EQ(shim::eventElapsedTime(&ms, ready, ready).code(), shim::Code::InvalidHandle);
}

TEST(ShimStreams, WithoutAnEventTwoStreamsRunConcurrently) {
  startRuntime("mlu370-x8", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  shim::Stream a, b;
  ASSERT_SHIM_OK(shim::streamCreate(&a));
  ASSERT_SHIM_OK(shim::streamCreate(&b));
  ASSERT_SHIM_OK(shim::launchKernel(a, "a", memoryBound(1e9, 4), {}));
  ASSERT_SHIM_OK(shim::launchKernel(b, "b", memoryBound(1e9, 4), {}));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  EXPECT_LT(named(acts, "b").at(0).start_ps, named(acts, "a").at(0).end_ps);
}

TEST(ShimStreams, StreamsBeyondTheHardwareQueuesShareOneAndSerialize) {
  // Two hardware queues: the default stream's and one shared by every created stream.
  startRuntime("mlu370-x8", 1, {"queues.hardware_queues=2"});
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  shim::Stream a, b;
  ASSERT_SHIM_OK(shim::streamCreate(&a));
  ASSERT_SHIM_OK(shim::streamCreate(&b));
  ASSERT_SHIM_OK(shim::launchKernel(a, "a", memoryBound(1e9, 4), {}));
  ASSERT_SHIM_OK(shim::launchKernel(b, "b", memoryBound(1e9, 4), {}));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  auto ka = named(acts, "a").at(0), kb = named(acts, "b").at(0);
  EXPECT_EQ(ka.hardware_queue, kb.hardware_queue);
  EXPECT_GE(kb.start_ps, ka.end_ps);  // a false dependency, as on the card
}

TEST(ShimStreams, PrioritiesClampToTheCardsRangeAndUrgentStreamsGetClustersFirst) {
  auto p = startRuntime("mlu370-x8", 1);   // MLU: least 7, greatest 0
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  shim::Stream filler, low, high, clamped;
  ASSERT_SHIM_OK(shim::streamCreate(&filler, 7));
  ASSERT_SHIM_OK(shim::streamCreate(&low, 7));
  ASSERT_SHIM_OK(shim::streamCreate(&high, 0));
  ASSERT_SHIM_OK(shim::streamCreate(&clamped, 42));
  int prio = -1;
  ASSERT_SHIM_OK(shim::streamGetPriority(clamped, &prio));
  EXPECT_EQ(prio, 7);
  ASSERT_SHIM_OK(shim::streamGetPriority(high, &prio));
  EXPECT_EQ(prio, 0);
  const uint32_t all = p.compute.clusters;
  // The filler holds every cluster; then a low- and a high-priority kernel queue for them.
  ASSERT_SHIM_OK(shim::launchKernel(filler, "filler", memoryBound(2e9, all), {}));
  ASSERT_SHIM_OK(shim::launchKernel(low, "low", memoryBound(1e8, all), {}));
  ASSERT_SHIM_OK(shim::launchKernel(high, "high", memoryBound(1e8, all), {}));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  auto f = named(acts, "filler").at(0), l = named(acts, "low").at(0), h = named(acts, "high").at(0);
  EXPECT_LT(l.submit_ps, h.submit_ps);  // low asked first ...
  EXPECT_LT(h.end_ps, l.end_ps);        // ... but high finished first
  EXPECT_GE(h.end_ps, f.end_ps);
}

TEST(ShimStreams, HandlesAreCheckedAndEventsFollowVendorSemantics) {
  startRuntime("mlu370-x8", 1);
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  uint32_t id = 0;
  ASSERT_SHIM_OK(shim::streamGetId(s, &id));
  EXPECT_GT(id, 0u);
  ASSERT_SHIM_OK(shim::streamDestroy(s));
  shim::Status st = shim::streamSynchronize(s);
  EXPECT_EQ(st.code(), shim::Code::InvalidHandle);
  EXPECT_NE(st.message().find("destroyed"), std::string::npos);
  EXPECT_EQ(shim::streamDestroy(nullptr).code(), shim::Code::InvalidHandle);

  shim::Event never, e;
  ASSERT_SHIM_OK(shim::eventCreate(&never));
  ASSERT_SHIM_OK(shim::eventCreate(&e));
  ASSERT_SHIM_OK(shim::eventQuery(never));         // never recorded: complete
  ASSERT_SHIM_OK(shim::eventSynchronize(never));
  ASSERT_SHIM_OK(shim::streamWaitEvent(nullptr, never));  // no-op
  ASSERT_SHIM_OK(shim::eventRecord(e, nullptr));
  float ms;
  st = shim::eventElapsedTime(&ms, never, e);
  EXPECT_EQ(st.code(), shim::Code::InvalidHandle);
  EXPECT_NE(st.message().find("never recorded"), std::string::npos);
  EXPECT_EQ(shim::eventCreate(&e, 0x100).code(), shim::Code::InvalidValue);
  EXPECT_EQ(shim::eventCreate(&e, shim::kEventInterprocess).code(), shim::Code::InvalidValue);
  ASSERT_SHIM_OK(shim::eventDestroy(never));
  EXPECT_EQ(shim::eventQuery(never).code(), shim::Code::InvalidHandle);
}

TEST(ShimStreams, AKernelThatThrowsFailsItsLaunchOnly) {
  startRuntime("mlu370-x8", 1);
  shim::Status st = shim::launchKernel(nullptr, "broken", memoryBound(1e6, 1),
                                       [] { throw std::runtime_error("index out of range"); });
  EXPECT_EQ(st.code(), shim::Code::KernelFailed);
  EXPECT_NE(st.message().find("broken"), std::string::npos);
  EXPECT_NE(st.message().find("index out of range"), std::string::npos);
  int x = 0;
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "fine", memoryBound(1e6, 1), [&] { x = 1; }));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  EXPECT_EQ(x, 1);
}

TEST(ShimStreams, UnsupportedDataTypeNamesThePresetKey) {
  startRuntime("mlu370-x8", 1);   // no TF32 on MLU370
  shim::KernelCost c = memoryBound(1e6, 1);
  c.dtype = shim::DataType::TFloat32;
  shim::Status st = shim::launchKernel(nullptr, "tf32 gemm", c, {});
  EXPECT_EQ(st.code(), shim::Code::NotSupported);
  EXPECT_NE(st.message().find("compute.peak.tf32"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("MLU370-X8"), std::string::npos) << st.message();
}

// The runtime's own marker (a receive's posting point) is recorded without host time; a
// program's event record costs its host.event_overhead. Both mark the stream alike.
TEST(ShimStreams, ARuntimeMarkerIsRecordedWithoutHostTime) {
  const auto p = startRuntime("mlu370-x8", 1);
  shim::Stream s = nullptr;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  shim::Event marker = nullptr, plain = nullptr;
  ASSERT_SHIM_OK(shim::eventCreate(&marker, shim::kEventRuntimeMarker | shim::kEventDisableTiming));
  ASSERT_SHIM_OK(shim::eventCreate(&plain, shim::kEventDefault));
  uint64_t t0 = 0, t1 = 0, t2 = 0;
  ASSERT_SHIM_OK(shim::hostTimePs(&t0));
  ASSERT_SHIM_OK(shim::eventRecord(marker, s));
  ASSERT_SHIM_OK(shim::hostTimePs(&t1));
  ASSERT_SHIM_OK(shim::eventRecord(plain, s));
  ASSERT_SHIM_OK(shim::hostTimePs(&t2));
  EXPECT_EQ(t1, t0);
  EXPECT_EQ(t2 - t1, static_cast<uint64_t>(p.host.event_overhead_s * 1e12 + 0.5));
  ASSERT_SHIM_OK(shim::streamSynchronize(s));
  EXPECT_SHIM_OK(shim::eventQuery(marker));
  EXPECT_EQ(shim::eventCreate(&marker, 16u).code(), shim::Code::InvalidValue);
}
