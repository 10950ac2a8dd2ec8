#include "device_models/DeviceParams.h"

#include <algorithm>
#include <cmath>

namespace cardsim::model {

const char* dtypeName(DType t) {
  static const char* names[] = {"fp64", "fp32", "tf32", "fp16", "bf16", "int8"};
  return names[static_cast<size_t>(t)];
}

const char* kernelClassName(KernelClass k) {
  static const char* names[] = {"gemm", "elementwise", "reduction", "other"};
  return names[static_cast<size_t>(k)];
}

double peakFor(const ComputeParams& c, KernelClass k, DType t) {
  const auto i = [](DType d) { return static_cast<size_t>(d); };
  if (k == KernelClass::Gemm) return c.peak_ops_per_s[i(t)];
  if (t == DType::TF32 || t == DType::INT8) return c.vector_peak_ops_per_s[i(DType::FP32)];
  return c.vector_peak_ops_per_s[i(t)];
}

double pcieLaneBytesPerSecond(uint32_t generation) {
  // Transfer rate per lane and line encoding: Gen1/2 use 8b/10b, Gen3-5 128b/130b,
  // Gen6 FLIT mode about 242/256.
  switch (generation) {
    case 1: return 2.5e9 * 8.0 / 10.0 / 8.0;
    case 2: return 5.0e9 * 8.0 / 10.0 / 8.0;
    case 3: return 8.0e9 * 128.0 / 130.0 / 8.0;
    case 4: return 16.0e9 * 128.0 / 130.0 / 8.0;
    case 5: return 32.0e9 * 128.0 / 130.0 / 8.0;
    case 6: return 64.0e9 * 242.0 / 256.0 / 8.0;
    default: return 0;
  }
}

uint32_t kernelTiles(const ComputeParams& c, KernelClass k, DType t, double flops,
                     double bytes, uint32_t given) {
  if (given > 0) return given;
  const double peak = peakFor(c, k, t);
  const double eff = c.efficiency[static_cast<std::size_t>(k)];
  // A kernel's decomposition is its own: fixed in bytes and in cycles, not in any bandwidth,
  // or a what-if with more of it would cut kernels finer and pay more waves.
  const double ops_per_cycle = c.clock_hz > 0 ? peak * eff / std::max<uint32_t>(1, c.clusters) / c.clock_hz : 0;
  const double tile_ops = ops_per_cycle * c.tile_cycles;
  const double by_bytes = std::ceil(bytes / c.tile_bytes);
  const double by_work = tile_ops > 0 ? std::ceil(flops / tile_ops) : 0;
  return static_cast<uint32_t>(std::clamp(std::max(by_bytes, by_work), 1.0, 1048576.0));
}

}  // namespace cardsim::model
