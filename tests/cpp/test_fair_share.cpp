// Tests for device_models/FairShare.h: weighted processor sharing of one bandwidth.
// Every expected time below is the closed form of processor sharing, computed here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "device_models/FairShare.h"
#include "device_models/fabric/MaxMinFair.h"

namespace {

using cardsim::model::FairShare;

constexpr double kBw = 10e9;        // 10 GB/s
constexpr double kMiB = 1048576.0;  // flow sizes

// Relative tolerance for times and byte counts that went through a few divisions.
void expectNear(double actual, double expected, const char* what) {
  EXPECT_NEAR(actual, expected, 1e-12 * std::max(1.0, std::abs(expected))) << what;
}

bool holds(const std::vector<void*>& v, void* p) {
  return std::find(v.begin(), v.end(), p) != v.end();
}

TEST(FairShare, IdleReportsMinusOne) {
  FairShare fs(kBw);
  EXPECT_LT(fs.secondsToNextFinish(), 0);
  EXPECT_EQ(fs.active(), 0u);
  EXPECT_TRUE(fs.popFinished().empty());
  EXPECT_DOUBLE_EQ(fs.bytesPerSecond(), kBw);
  EXPECT_DOUBLE_EQ(fs.bytesMoved(), 0.0);
  EXPECT_DOUBLE_EQ(fs.busySeconds(), 0.0);
  // Time passing while idle is not busy time.
  fs.advanceTo(5.0);
  EXPECT_LT(fs.secondsToNextFinish(), 0);
  EXPECT_DOUBLE_EQ(fs.busySeconds(), 0.0);
  EXPECT_DOUBLE_EQ(fs.bytesMoved(), 0.0);
}

TEST(FairShare, SingleFlowFinishesAtBytesOverBandwidth) {
  FairShare fs(kBw);
  int a = 0;
  const double bytes = 64 * kMiB;
  fs.advanceTo(0);
  fs.add(bytes, 1.0, &a);
  EXPECT_EQ(fs.active(), 1u);
  const double t = bytes / kBw;
  expectNear(fs.secondsToNextFinish(), t, "time to finish");

  // Halfway: not finished, half the bytes moved, half the time left.
  fs.advanceTo(t / 2);
  EXPECT_TRUE(fs.popFinished().empty());
  expectNear(fs.bytesMoved(), bytes / 2, "bytes moved halfway");
  expectNear(fs.secondsToNextFinish(), t / 2, "time left halfway");

  fs.advanceTo(t);
  const std::vector<void*> done = fs.popFinished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0], &a);
  EXPECT_EQ(fs.active(), 0u);
  EXPECT_LT(fs.secondsToNextFinish(), 0);
  expectNear(fs.bytesMoved(), bytes, "bytes moved");
  expectNear(fs.busySeconds(), t, "busy seconds");
}

TEST(FairShare, SingleFlowStartedLaterFinishesRelativeToItsStart) {
  FairShare fs(kBw);
  int a = 0;
  const double start = 3.0;
  const double bytes = 10 * kMiB;
  fs.advanceTo(start);
  fs.add(bytes, 1.0, &a);
  // secondsToNextFinish is relative to the last advanceTo, not absolute.
  expectNear(fs.secondsToNextFinish(), bytes / kBw, "relative finish time");
  fs.advanceTo(start + bytes / kBw);
  EXPECT_EQ(fs.popFinished(), std::vector<void*>{&a});
  expectNear(fs.busySeconds(), bytes / kBw, "busy seconds exclude the idle start");
}

TEST(FairShare, TwoEqualFlowsEachTakeTwiceAsLong) {
  FairShare fs(kBw);
  int a = 0, b = 0;
  const double bytes = 32 * kMiB;
  fs.advanceTo(0);
  fs.add(bytes, 1.0, &a);
  fs.add(bytes, 1.0, &b);
  const double t = 2 * bytes / kBw;
  expectNear(fs.secondsToNextFinish(), t, "two equal flows");

  // Just before the end neither is done.
  fs.advanceTo(t * 0.99);
  EXPECT_TRUE(fs.popFinished().empty());
  EXPECT_EQ(fs.active(), 2u);

  fs.advanceTo(t);
  const std::vector<void*> done = fs.popFinished();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_TRUE(holds(done, &a));
  EXPECT_TRUE(holds(done, &b));
  expectNear(fs.bytesMoved(), 2 * bytes, "bytes moved");
  expectNear(fs.busySeconds(), t, "busy seconds");
}

TEST(FairShare, EqualWeightsScaleTheSame) {
  // Weights 2:2 behave exactly like 1:1.
  FairShare fs(kBw);
  int a = 0, b = 0;
  const double bytes = 8 * kMiB;
  fs.advanceTo(0);
  fs.add(bytes, 2.0, &a);
  fs.add(bytes, 2.0, &b);
  expectNear(fs.secondsToNextFinish(), 2 * bytes / kBw, "weights 2:2");
}

TEST(FairShare, WeightsThreeToOneSplitBandwidthThreeToOne) {
  FairShare fs(kBw);
  int heavy = 0, light = 0;
  const double bytes = 30 * kMiB;
  fs.advanceTo(0);
  fs.add(bytes, 3.0, &heavy);
  fs.add(bytes, 1.0, &light);

  // heavy runs at 3/4 of the bandwidth, light at 1/4.
  const double heavy_rate = kBw * 3.0 / 4.0;
  const double light_rate = kBw * 1.0 / 4.0;
  const double t1 = bytes / heavy_rate;
  expectNear(fs.secondsToNextFinish(), t1, "heavy flow finishes first");

  // Partway, the moved bytes split 3:1.
  const double tq = t1 / 4;
  fs.advanceTo(tq);
  EXPECT_TRUE(fs.popFinished().empty());
  expectNear(fs.bytesMoved(), (heavy_rate + light_rate) * tq, "bytes moved partway");
  expectNear(fs.secondsToNextFinish(), t1 - tq, "heavy still first");

  fs.advanceTo(t1);
  EXPECT_EQ(fs.popFinished(), std::vector<void*>{&heavy});
  EXPECT_EQ(fs.active(), 1u);

  // light moved light_rate * t1 = bytes / 3 so far; alone now, it gets the full bandwidth.
  const double light_left = bytes - light_rate * t1;
  expectNear(light_left, 2 * bytes / 3, "closed form sanity");
  expectNear(fs.secondsToNextFinish(), light_left / kBw, "light alone");
  expectNear(fs.bytesMoved(), bytes + light_rate * t1, "bytes moved at t1");

  const double t2 = t1 + light_left / kBw;
  fs.advanceTo(t2);
  EXPECT_EQ(fs.popFinished(), std::vector<void*>{&light});
  // Work conserving: both flows together take (2 * bytes) / bandwidth.
  expectNear(t2, 2 * bytes / kBw, "work conservation");
  expectNear(fs.busySeconds(), t2, "busy seconds");
  expectNear(fs.bytesMoved(), 2 * bytes, "bytes moved");
}

TEST(FairShare, SmallHeavyFlowVersusLargeLightFlow) {
  // The flow that finishes first is the one with the least remaining * total / weight,
  // not the smallest one: 1 MiB at weight 1 vs 2 MiB at weight 4.
  FairShare fs(kBw);
  int small = 0, large = 0;
  fs.advanceTo(0);
  fs.add(1 * kMiB, 1.0, &small);
  fs.add(2 * kMiB, 4.0, &large);
  const double t_small = 1 * kMiB / (kBw * 1.0 / 5.0);
  const double t_large = 2 * kMiB / (kBw * 4.0 / 5.0);
  ASSERT_LT(t_large, t_small);
  expectNear(fs.secondsToNextFinish(), t_large, "large heavy flow first");
  fs.advanceTo(t_large);
  EXPECT_EQ(fs.popFinished(), std::vector<void*>{&large});
}

TEST(FairShare, FlowJoiningMidwayFollowsProcessorSharing) {
  // A (N_A bytes) alone from 0; B (N_B bytes) joins at t0 with equal weight.
  FairShare fs(kBw);
  int a = 0, b = 0;
  const double n_a = 40 * kMiB;
  const double n_b = 30 * kMiB;
  const double t0 = 0.25 * n_a / kBw;  // A is a quarter done when B joins

  fs.advanceTo(0);
  fs.add(n_a, 1.0, &a);
  fs.advanceTo(t0);
  EXPECT_TRUE(fs.popFinished().empty());
  fs.add(n_b, 1.0, &b);

  // After t0 each gets half the bandwidth.
  const double a_left = n_a - kBw * t0;  // 30 MiB
  ASSERT_LE(a_left, n_b);                // A (or both) finishes first
  const double t_a = t0 + a_left / (kBw / 2);
  expectNear(fs.secondsToNextFinish(), t_a - t0, "A's finish after B joins");

  fs.advanceTo(t_a);
  const std::vector<void*> first = fs.popFinished();
  ASSERT_FALSE(first.empty());
  EXPECT_TRUE(holds(first, &a));

  // B moved a_left bytes alongside A; if anything is left it runs alone.
  const double b_left = n_b - a_left;
  const double t_b = t_a + b_left / kBw;
  if (b_left > 0) {
    EXPECT_EQ(first.size(), 1u);
    expectNear(fs.secondsToNextFinish(), b_left / kBw, "B alone");
    fs.advanceTo(t_b);
    EXPECT_EQ(fs.popFinished(), std::vector<void*>{&b});
  } else {
    EXPECT_TRUE(holds(first, &b));
  }
  // Work conserving and never idle: the last finish is (N_A + N_B) / bandwidth.
  expectNear(t_b, (n_a + n_b) / kBw, "work conservation");
  expectNear(fs.busySeconds(), (n_a + n_b) / kBw, "busy seconds");
  expectNear(fs.bytesMoved(), n_a + n_b, "bytes moved");
  EXPECT_LT(fs.secondsToNextFinish(), 0);
}

TEST(FairShare, LateJoinerThatFinishesFirst) {
  // A large flow runs alone; a small flow joins and finishes while A is still going.
  FairShare fs(kBw);
  int a = 0, b = 0;
  const double n_a = 100 * kMiB;
  const double n_b = 10 * kMiB;
  const double t0 = 20 * kMiB / kBw;
  fs.advanceTo(0);
  fs.add(n_a, 1.0, &a);
  fs.advanceTo(t0);
  fs.add(n_b, 1.0, &b);

  const double t_b = t0 + n_b / (kBw / 2);
  expectNear(fs.secondsToNextFinish(), t_b - t0, "B finishes first");
  fs.advanceTo(t_b);
  EXPECT_EQ(fs.popFinished(), std::vector<void*>{&b});

  // A moved kBw*t0 alone, then n_b alongside B.
  const double a_left = n_a - kBw * t0 - n_b;
  expectNear(fs.secondsToNextFinish(), a_left / kBw, "A alone again");
  fs.advanceTo(t_b + a_left / kBw);
  EXPECT_EQ(fs.popFinished(), std::vector<void*>{&a});
  expectNear(t_b + a_left / kBw, (n_a + n_b) / kBw, "work conservation");
}

TEST(FairShare, BusySecondsExcludeIdleGaps) {
  FairShare fs(kBw);
  int a = 0, b = 0;
  const double n = 5 * kMiB;
  fs.advanceTo(1.0);
  fs.add(n, 1.0, &a);
  fs.advanceTo(1.0 + n / kBw);
  EXPECT_EQ(fs.popFinished(), std::vector<void*>{&a});

  fs.advanceTo(10.0);  // idle for a while
  expectNear(fs.busySeconds(), n / kBw, "busy seconds after the first flow");
  fs.add(2 * n, 1.0, &b);
  fs.advanceTo(10.0 + 2 * n / kBw);
  EXPECT_EQ(fs.popFinished(), std::vector<void*>{&b});

  expectNear(fs.busySeconds(), 3 * n / kBw, "busy seconds");
  expectNear(fs.bytesMoved(), 3 * n, "bytes moved");
  EXPECT_LT(fs.busySeconds(), 10.0);
}

TEST(FairShare, AdvancingBackwardsOrToTheSameTimeMovesNothing) {
  FairShare fs(kBw);
  int a = 0;
  fs.advanceTo(1.0);
  fs.add(kMiB, 1.0, &a);
  fs.advanceTo(1.0);
  EXPECT_DOUBLE_EQ(fs.bytesMoved(), 0.0);
  EXPECT_DOUBLE_EQ(fs.busySeconds(), 0.0);
  expectNear(fs.secondsToNextFinish(), kMiB / kBw, "unchanged");
}

TEST(FairShare, PopFinishedReturnsEachCookieOnce) {
  FairShare fs(kBw);
  int a = 0;
  fs.advanceTo(0);
  fs.add(kMiB, 1.0, &a);
  fs.advanceTo(kMiB / kBw);
  EXPECT_EQ(fs.popFinished().size(), 1u);
  EXPECT_TRUE(fs.popFinished().empty());
  EXPECT_EQ(fs.active(), 0u);
}

TEST(FairShare, PoppingAFlowReturnsItsShareToTheOthers) {
  // Three equal flows of different sizes: finishes at the closed forms of PS.
  FairShare fs(kBw);
  int a = 0, b = 0, c = 0;
  const double s1 = 1 * kMiB, s2 = 2 * kMiB, s3 = 4 * kMiB;
  fs.advanceTo(0);
  fs.add(s3, 1.0, &c);
  fs.add(s1, 1.0, &a);
  fs.add(s2, 1.0, &b);
  const double t1 = 3 * s1 / kBw;
  const double t2 = t1 + 2 * (s2 - s1) / kBw;
  const double t3 = t2 + (s3 - s2) / kBw;
  expectNear(fs.secondsToNextFinish(), t1, "first");
  fs.advanceTo(t1);
  EXPECT_EQ(fs.popFinished(), std::vector<void*>{&a});
  expectNear(fs.secondsToNextFinish(), t2 - t1, "second");
  fs.advanceTo(t2);
  EXPECT_EQ(fs.popFinished(), std::vector<void*>{&b});
  expectNear(fs.secondsToNextFinish(), t3 - t2, "third");
  fs.advanceTo(t3);
  EXPECT_EQ(fs.popFinished(), std::vector<void*>{&c});
  expectNear(t3, (s1 + s2 + s3) / kBw, "work conservation");
  expectNear(fs.busySeconds(), t3, "busy");
  expectNear(fs.bytesMoved(), s1 + s2 + s3, "moved");
}

}  // namespace

// The one max-min solver under FairShare and the fabric's FlowSolver.
TEST(MaxMinFair, WeightedFlowsOverSeveralResourcesFillProgressively) {
  cardsim::fabric::MaxMinFair s;
  s.reset(2);
  s.capacity()[0] = 10;   // A
  s.capacity()[1] = 4;    // B
  const uint32_t a = 0, b = 1, ab[] = {0, 1};
  s.addFlowOn(a);             // on A alone
  s.addFlow(ab, 2);         // on A and B
  s.addFlowOn(b, 3);          // on B, weight 3
  s.solve();
  // B is the bottleneck (4 over weights 1 + 3): 1 and 3; A's flow takes the 9 left of A.
  EXPECT_DOUBLE_EQ(s.rates()[1], 1);
  EXPECT_DOUBLE_EQ(s.rates()[2], 3);
  EXPECT_DOUBLE_EQ(s.rates()[0], 9);
  EXPECT_DOUBLE_EQ(s.capacity()[0], 0);
  EXPECT_DOUBLE_EQ(s.capacity()[1], 0);
}

TEST(MaxMinFair, CapsAndFlowsOnNoResource) {
  cardsim::fabric::MaxMinFair s;
  s.reset(1);
  s.capacity()[0] = 12;
  s.addFlowOn(0, 1, 2);    // capped at 2, below its share of 3
  s.addFlowOn(0, 2);       // the 10 left, 2:1
  s.addFlowOn(0, 1);
  s.addFlow(nullptr, 0, 1, 5);   // on nothing shared: its cap
  s.addFlow(nullptr, 0);         // on nothing, uncapped: at once
  s.solve();
  EXPECT_DOUBLE_EQ(s.rates()[0], 2);
  EXPECT_DOUBLE_EQ(s.rates()[1], 20.0 / 3);
  EXPECT_DOUBLE_EQ(s.rates()[2], 10.0 / 3);
  EXPECT_DOUBLE_EQ(s.rates()[3], 5);
  EXPECT_EQ(s.rates()[4], std::numeric_limits<double>::infinity());
  // A new problem on the same solver starts clean.
  s.reset(1);
  s.capacity()[0] = 8;
  s.addFlowOn(0);
  s.solve();
  ASSERT_EQ(s.rates().size(), 1u);
  EXPECT_DOUBLE_EQ(s.rates()[0], 8);
}
