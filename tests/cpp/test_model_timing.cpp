// The card model's time rules, each against a hand calculation: which peak a kernel runs
// at (matrix units for GEMMs, vector units otherwise), whole cycles of the preset clock
// with a per-wave overhead, and how kernels and copies share the memory system (a kernel
// on k clusters draws at most k cluster ports' bandwidth; a DMA engine weighs
// dma.memory_weight against the whole cluster array's 1).
#include <cmath>

#include "ShimTestUtil.h"
#include "device_models/FairShare.h"

namespace shim = cardsim::shim;
using namespace cardsim::testing;
using cardsim::model::DeviceParams;
using cardsim::model::DType;
using cardsim::model::FairShare;
using cardsim::model::KernelClass;

namespace {

double eff(const DeviceParams& p, KernelClass k) {
  return p.compute.efficiency[static_cast<size_t>(k)];
}
double vectorPeak(const DeviceParams& p, DType t) {
  return p.compute.vector_peak_ops_per_s[static_cast<size_t>(t)];
}
double matrixPeak(const DeviceParams& p, DType t) {
  return p.compute.peak_ops_per_s[static_cast<size_t>(t)];
}

// A kernel with work and no traffic, cut into `tiles`.
shim::KernelCost computeOnly(shim::KernelClass k, shim::DataType t, double flops, uint32_t tiles) {
  shim::KernelCost c;
  c.kernel_class = k;
  c.dtype = t;
  c.flops = flops;
  c.tiles = tiles;
  return c;
}

// One kernel alone, holding every cluster it can use, in one phase of `waves` waves:
// dispatch latency, then (memory latency + waves x (tile cycles + overhead)) rounded up
// to whole cycles. `ops_per_cycle` is one cluster's share of the peak per cycle.
double aloneComputeBound(const DeviceParams& p, double tile_ops, double ops_per_cycle, double waves) {
  const double f = p.compute.clock_hz;
  const double tile_cycles = std::ceil(tile_ops / ops_per_cycle);
  const double phase_cycles =
      std::ceil(p.memory.latency_s * f + waves * (tile_cycles + p.compute.wave_overhead_cycles) - 1e-6);
  return p.compute.dispatch_latency_s + phase_cycles / f;
}

}  // namespace

// ---- Peaks: GEMMs on the matrix units, everything else on the vector units ----------

TEST(ModelPeaks, Fp16ElementwiseRunsAtTheVectorPeakAndGemmAtTheMatrixPeak) {
  auto p = startRuntime("h100-sxm", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  const uint32_t tiles = p.compute.clusters;  // one wave
  const double flops = 1e12;
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "ew", computeOnly(shim::KernelClass::Elementwise,
                                                               shim::DataType::Float16, flops, tiles), {}));
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "gemm", computeOnly(shim::KernelClass::Gemm,
                                                                 shim::DataType::Float16, flops, tiles), {}));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  const double f = p.compute.clock_hz, n = p.compute.clusters;
  // 133.8 TFLOPS x 0.9 for the elementwise kernel, 989.4 TFLOPS x 0.75 for the GEMM.
  const double ew = aloneComputeBound(p, flops / tiles,
                                      133.8e12 * eff(p, KernelClass::Elementwise) / n / f, 1);
  const double gemm = aloneComputeBound(p, flops / tiles, 989.4e12 * eff(p, KernelClass::Gemm) / n / f, 1);
  EXPECT_DOUBLE_EQ(vectorPeak(p, DType::FP16), 133.8e12);
  EXPECT_DOUBLE_EQ(matrixPeak(p, DType::FP16), 989.4e12);
  EXPECT_NEAR(durationS(named(acts, "ew").at(0)), ew, 1e-9);
  EXPECT_NEAR(durationS(named(acts, "gemm").at(0)), gemm, 1e-9);
  EXPECT_GT(durationS(named(acts, "ew").at(0)), 5 * durationS(named(acts, "gemm").at(0)));
}

TEST(ModelPeaks, Tf32GemmRunsAtTheTf32PeakAndTf32VectorWorkAtTheFp32VectorPeak) {
  auto p = startRuntime("br100", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  const uint32_t tiles = p.compute.clusters;
  const double flops = 1e12;
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "tf32", computeOnly(shim::KernelClass::Gemm,
                                                                 shim::DataType::TFloat32, flops, tiles), {}));
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "fp32", computeOnly(shim::KernelClass::Gemm,
                                                                 shim::DataType::Float32, flops, tiles), {}));
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "tf32-ew", computeOnly(shim::KernelClass::Elementwise,
                                                                    shim::DataType::TFloat32, flops, tiles), {}));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  const double f = p.compute.clock_hz, n = p.compute.clusters;
  const double ge = eff(p, KernelClass::Gemm), ee = eff(p, KernelClass::Elementwise);
  EXPECT_NEAR(durationS(named(acts, "tf32").at(0)), aloneComputeBound(p, flops / tiles, 512e12 * ge / n / f, 1), 1e-9);
  EXPECT_NEAR(durationS(named(acts, "fp32").at(0)), aloneComputeBound(p, flops / tiles, 256e12 * ge / n / f, 1), 1e-9);
  EXPECT_NEAR(durationS(named(acts, "tf32-ew").at(0)),
              aloneComputeBound(p, flops / tiles, vectorPeak(p, DType::FP32) * ee / n / f, 1), 1e-9);
}

// ---- Cycles: whole cycles of the preset clock, a fixed overhead per wave ----------------

namespace {
// 3 waves on MLU370-X8 whose tiles take a fractional number of cycles at the preset clock.
void expectWholeCyclesAndWaveOverhead(const DeviceParams& p) {
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  const double f = p.compute.clock_hz, n = p.compute.clusters;
  const double ops_per_cycle = 48e12 * eff(p, KernelClass::Gemm) / n / f;
  const double tile_ops = 1000.5 * ops_per_cycle;  // 1000.5 cycles: takes 1001
  const uint32_t tiles = 3 * p.compute.clusters;
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "k", computeOnly(shim::KernelClass::Gemm, shim::DataType::Float16,
                                                              tile_ops * tiles, tiles), {}));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  // By hand: 600 ns of memory latency is 780 cycles at 1.3 GHz, each wave 1001 + overhead.
  const double cycles = std::ceil(600e-9 * f - 1e-6) + 3 * (1001 + p.compute.wave_overhead_cycles);
  const double expected = 3e-6 + cycles / f;
  EXPECT_NEAR(durationS(acts.at(0)), expected, 2e-12 * 4);
  // Without whole cycles and the overhead it would be 3 us + 600 ns + 3 x 1000.5 cycles.
  EXPECT_GT(durationS(acts.at(0)) - (3e-6 + 600e-9 + 3 * 1000.5 / f), 3 * p.compute.wave_overhead_cycles / f);
}
}  // namespace

TEST(ModelCycles, TileComputeIsWholeCyclesPlusTheWaveOverhead) {
  auto p = startRuntime("mlu370-x8", 1);
  ASSERT_DOUBLE_EQ(p.compute.clock_hz, 1.3e9);
  ASSERT_DOUBLE_EQ(p.compute.wave_overhead_cycles, 100);
  expectWholeCyclesAndWaveOverhead(p);
}

TEST(ModelCycles, TheClockSetsTheCycleTime) {
  // Twice the clock, same peaks: a tile does half the work per cycle, the overhead takes
  // half the time.
  auto p = startRuntime("mlu370-x8", 1, {"compute.clock=2.6 GHz", "compute.wave_overhead=400 cycles"});
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  const double f = 2.6e9, n = p.compute.clusters;
  const double ops_per_cycle = 48e12 * eff(p, KernelClass::Gemm) / n / f;
  const uint32_t tiles = 2 * p.compute.clusters;
  const double tile_ops = 2000.25 * ops_per_cycle;  // takes 2001 cycles
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "k", computeOnly(shim::KernelClass::Gemm, shim::DataType::Float16,
                                                              tile_ops * tiles, tiles), {}));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  // 600 ns = 1560 cycles at 2.6 GHz; two waves of 2001 + 400 cycles.
  const double expected = 3e-6 + (1560 + 2 * (2001 + 400)) / f;
  EXPECT_NEAR(durationS(acts.at(0)), expected, 8e-12);
}

TEST(ModelCycles, AKernelOfNoWorkStillCostsItsWaves) {
  auto p = startRuntime("br100", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  // 5 waves of nothing on 1 GHz: the memory latency (500 ns = 500 cycles) and 5 overheads.
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "empty", computeOnly(shim::KernelClass::Other, shim::DataType::Float32,
                                                                  0, 5 * p.compute.clusters), {}));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  EXPECT_NEAR(durationS(acts.at(0)), 3e-6 + (500 + 5 * 100) / 1e9, 4e-12);
}

// ---- Memory sharing ------------------------------------------------------------------------

TEST(ModelMemorySharing, AKernelOnOneClusterDrawsAtMostOneClustersBandwidth) {
  // MLU370: mlu-ops times a one-cluster task against 128 GB/s of the chip's 307.2 GB/s.
  auto p = startRuntime("mlu370-x8", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  ASSERT_DOUBLE_EQ(p.memory.cluster_bandwidth_bytes_per_s, 128e9);
  const double bytes = 1e9;
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "one", memoryBound(bytes, 1), {}));
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "two", memoryBound(bytes, 2), {}));
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "all", memoryBound(bytes, 8), {}));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  // dispatch 3 us + latency 600 ns + bytes / min(k x 128 GB/s, 307.2 GB/s), to the cycle.
  const double one = 3e-6 + 600e-9 + bytes / 128e9;
  const double two = 3e-6 + 600e-9 + bytes / 256e9;
  const double all = 3e-6 + 600e-9 + bytes / 307.2e9;
  const double cycle = 1 / p.compute.clock_hz;
  EXPECT_NEAR(durationS(named(acts, "one").at(0)), one, cycle);
  EXPECT_NEAR(durationS(named(acts, "two").at(0)), two, cycle);
  EXPECT_NEAR(durationS(named(acts, "all").at(0)), all, cycle);
}

TEST(ModelMemorySharing, ACopyBesideAKernelOnEveryBr100ClusterGetsTheDmaWeightsShare) {
  auto p = startRuntime("br100", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  const size_t copy_bytes = 64ull << 20;
  void *a, *b;
  ASSERT_SHIM_OK(shim::malloc(&a, copy_bytes));
  ASSERT_SHIM_OK(shim::malloc(&b, copy_bytes));
  shim::Stream s1, s2;
  ASSERT_SHIM_OK(shim::streamCreate(&s1));
  ASSERT_SHIM_OK(shim::streamCreate(&s2));
  // The kernel holds all 32 SPCs (weight 1) and its traffic outlasts the copy.
  ASSERT_SHIM_OK(shim::launchKernel(s1, "full", memoryBound(8e9, p.compute.clusters), {}));
  ASSERT_SHIM_OK(shim::memcpyAsync(b, a, copy_bytes, shim::MemcpyKind::DeviceToDevice, s2));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  const shim::ActivityRecord full = named(acts, "full").at(0);
  const shim::ActivityRecord copy = named(acts, "memcpy DtoD").at(0);
  ASSERT_GT(full.end_ps, copy.end_ps);
  // By hand: the copy's traffic starts after its 1 us latency, the kernel's after 3 us of
  // dispatch and 500 ns of memory latency; in between the copy has the memory to itself.
  // Then it weighs 0.25 against the kernel's 1 and moves the rest of its 2 x 64 MiB (read
  // and write) at 1.64 TB/s x 0.25 / 1.25 = 328 GB/s.
  ASSERT_DOUBLE_EQ(p.dma.memory_weight, 0.25);
  const double copy_flow = seconds(copy.start_ps) + 1e-6;
  const double kernel_flow = seconds(full.start_ps) + 3e-6 + 500e-9;
  const double alone = std::max(0.0, kernel_flow - copy_flow);
  ASSERT_LT(alone, 10e-6);
  const double expected = 1e-6 + alone + (2.0 * copy_bytes - alone * 1.64e12) / 328e9;
  EXPECT_NEAR(durationS(copy), expected, 1e-6 * expected);
}

// A collective loads the memory of its card with what it reads and writes there (5(n-1)/n
// of the bytes for an all-reduce), spread over its fabric time at most: a memory-bound
// kernel beside it gets the rest, and the collective's own time stays the fabric's.
TEST(ModelMemorySharing, ACollectiveBesideAKernelTakesItsTrafficFromTheKernelNotItsOwnTime) {
  auto p = startRuntime("mlu370-x8", 8);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  shim::Stream comm, compute;
  ASSERT_SHIM_OK(shim::streamCreate(&comm));
  ASSERT_SHIM_OK(shim::streamCreate(&compute));
  shim::CollectiveDesc d;
  d.op = "all_reduce";
  d.bytes = 4e9;   // long enough to cover the kernel
  d.ranks = {0, 1, 2, 3, 4, 5, 6, 7};
  double model_s = 0;
  std::string algo;
  ASSERT_SHIM_OK(shim::launchFabricCollective(comm, d, &model_s, &algo));
  const double kernel_bytes = 2e9;
  ASSERT_SHIM_OK(shim::launchKernel(compute, "beside", memoryBound(kernel_bytes, p.compute.clusters), {}));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  // The same kernel alone, after the collective.
  ASSERT_SHIM_OK(shim::launchKernel(compute, "after", memoryBound(kernel_bytes, p.compute.clusters), {}));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  auto acts = drain();
  std::vector<shim::ActivityRecord> colls;
  for (const auto& a : acts)
    if (a.kind == shim::ActivityRecord::Kind::Collective) colls.push_back(a);
  ASSERT_EQ(colls.size(), 1u);
  const shim::ActivityRecord beside = named(acts, "beside").at(0), after = named(acts, "after").at(0);
  // The collective keeps the fabric's time.
  EXPECT_NEAR(durationS(colls[0]), model_s, 1e-9);
  ASSERT_LT(seconds(beside.end_ps), seconds(colls[0].end_ps));
  // By hand: B = 307.2 GB/s; the collective asks for 5 x 7/8 x 4 GB over its time and, at
  // dma.memory_weight against the kernel's 1, gets at most B x w / (1 + w) of it.
  const double B = p.memory.bandwidth_bytes_per_s, w = p.dma.memory_weight;
  ASSERT_DOUBLE_EQ(B, 307.2e9);
  const double asked = 5 * 7.0 / 8 * d.bytes / model_s;
  const double taken = std::min(asked, B * w / (1 + w));
  ASSERT_GT(taken, 0.02 * B);   // a visible effect
  const double cycle = 1 / p.compute.clock_hz;
  EXPECT_NEAR(durationS(beside), 3e-6 + 600e-9 + kernel_bytes / (B - taken), 2 * cycle);
  // Once it has ended, nothing of its traffic is left behind.
  EXPECT_NEAR(durationS(after), 3e-6 + 600e-9 + kernel_bytes / B, cycle);
}

// Without a fabric server a rank knows only its own sends: every member is taken to send as
// it does, rotated, so on 2 ranks a skewed exchange takes its larger direction's transfer.
TEST(ModelMemorySharing, AnUnevenAllToAllTimedAloneTakesItsLargestSendsTime) {
  startRuntime("mlu370-x8", 2);
  shim::Stream s;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  const double S = 64 << 20;
  shim::CollectiveDesc d;
  d.op = "all_to_all";
  d.bytes = S;
  d.ranks = {0, 1};
  d.send_bytes = {S / 4, 3 * S / 4};
  double skewed = 0, even = 0, pair = 0;
  std::string algo;
  ASSERT_SHIM_OK(shim::launchFabricCollective(s, d, &skewed, &algo));
  EXPECT_EQ(algo, "direct");
  d.send_bytes.clear();
  ASSERT_SHIM_OK(shim::launchFabricCollective(s, d, &even, &algo));
  shim::CollectiveDesc one = d;
  one.op = "send_recv";
  one.bytes = 3 * S / 4;
  ASSERT_SHIM_OK(shim::launchFabricCollective(s, one, &pair, &algo));
  EXPECT_NEAR(skewed, pair, 1e-12);
  EXPECT_GT(skewed, 1.4 * even);
  // one size per member, and for all_to_all only
  d.send_bytes = {S};
  shim::Status st = shim::launchFabricCollective(s, d, &skewed, &algo);
  EXPECT_EQ(st.code(), shim::Code::InvalidValue);
  EXPECT_NE(st.message().find("one per member (2), got 1"), std::string::npos) << st.message();
  ASSERT_SHIM_OK(shim::deviceSynchronize());
}

// The arithmetic behind both rules: weighted max-min sharing with caps.
TEST(ModelMemorySharing, FairShareGivesACappedFlowItsCapAndTheRestToTheOthers) {
  FairShare fs(300.0);
  int k = 0, c = 0, d = 0;
  fs.advanceTo(0);
  fs.add(1e9, 0.125, &k, 128.0);  // 1 of 8 clusters: its share 300/1.125*0.125 = 33 < cap
  fs.add(1e9, 0.25, &c);
  EXPECT_DOUBLE_EQ(fs.rateOf(&k), 100.0);  // 300 x 0.125 / 0.375
  EXPECT_DOUBLE_EQ(fs.rateOf(&c), 200.0);
  fs.add(1e9, 1.0, &d, 50.0);            // weighs most, capped at 50
  // d takes its cap; 250 left splits 0.125 : 0.25.
  EXPECT_DOUBLE_EQ(fs.rateOf(&d), 50.0);
  EXPECT_NEAR(fs.rateOf(&k), 250.0 / 3, 1e-9);
  EXPECT_NEAR(fs.rateOf(&c), 500.0 / 3, 1e-9);
  // Alone, a capped flow leaves the rest of the bandwidth unused.
  FairShare alone(300.0);
  alone.advanceTo(0);
  alone.add(128.0, 1.0, &k, 128.0);
  EXPECT_DOUBLE_EQ(alone.secondsToNextFinish(), 1.0);
  // A flow removed before it finished gives its share back at once.
  EXPECT_TRUE(fs.remove(&d));
  EXPECT_FALSE(fs.remove(&d));
  EXPECT_DOUBLE_EQ(fs.rateOf(&d), 0.0);
  EXPECT_DOUBLE_EQ(fs.rateOf(&k), 100.0);
  EXPECT_DOUBLE_EQ(fs.rateOf(&c), 200.0);
  EXPECT_EQ(fs.active(), 2u);
}

// ---- Capacity as the vendor's tools report it -------------------------------------------------

TEST(ModelCapacity, AnH100ReportsItsTotalMemoryAsNvidiaSmiDoes) {
  startRuntime("h100-sxm", 1);
  shim::DeviceProperties props;
  ASSERT_SHIM_OK(shim::getDeviceProperties(&props, 0));
  EXPECT_EQ(props.total_memory_bytes, 81559ull << 20);  // "81559MiB"
  size_t free_bytes = 0, total = 0;
  ASSERT_SHIM_OK(shim::memGetInfo(&free_bytes, &total));
  EXPECT_EQ(total >> 20, 81559u);
  EXPECT_DOUBLE_EQ(props.vector_peak_fp16_flops, 133.8e12);
  EXPECT_DOUBLE_EQ(props.vector_peak_fp32_flops, 66.9e12);
  EXPECT_DOUBLE_EQ(props.vector_peak_fp64_flops, 33.5e12);
  EXPECT_DOUBLE_EQ(props.vector_peak_bf16_flops, 133.8e12);
  EXPECT_DOUBLE_EQ(props.peak_fp16_flops, 989.4e12);
}
