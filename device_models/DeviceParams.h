// Typed, validated device parameters in base units (bytes, seconds, bytes/s, ops/s, cycles).
// The simulator builds them from a preset plus overrides; the device models read only these.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace cardsim::model {

enum class DType : uint8_t { FP64, FP32, TF32, FP16, BF16, INT8 };
inline constexpr std::size_t kDTypeCount = 6;
const char* dtypeName(DType t);

enum class KernelClass : uint8_t { Gemm, Elementwise, Reduction, Other };
inline constexpr std::size_t kKernelClassCount = 4;
const char* kernelClassName(KernelClass k);

struct ComputeParams {
  uint32_t clusters = 0;
  uint32_t cores_per_cluster = 0;
  double clock_hz = 0;
  // Whole card, per data type; 0 = unsupported. Matrix units (tensor cores, Cambricon's
  // matrix unit) time GEMMs; vector units time everything else. The vector array has no
  // TF32 or INT8 entry of its own (see peakFor).
  std::array<double, kDTypeCount> peak_ops_per_s{};
  std::array<double, kDTypeCount> vector_peak_ops_per_s{};
  std::array<double, kKernelClassCount> efficiency{};       // (0, 1]
  double dispatch_latency_s = 0;
  double graph_dispatch_latency_s = 0;
  double wave_overhead_cycles = 0;  // fixed cost of one wave of tiles on a cluster
  double tile_bytes = 0;
  double tile_cycles = 0;           // a tile's compute at most this, in cycles of one cluster
};

// The peak a kernel of class `k` in data type `t` runs at: GEMMs on the matrix units,
// everything else on the vector units. Vector units have no TF32 form (TF32 is a matrix
// input format) and integer vector work is timed as 32-bit lanes, as the kernel layer
// times every integer type: both run at the fp32 vector rate.
double peakFor(const ComputeParams& c, KernelClass k, DType t);

struct MemoryParams {
  uint64_t capacity_bytes = 0;
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;
  // The most one cluster's port can draw from memory: a kernel holding k clusters gets at
  // most k times this (and never more than bandwidth_bytes_per_s).
  double cluster_bandwidth_bytes_per_s = 0;
  uint32_t channels = 0;  // descriptive: traffic interleaves over them evenly (MemorySystem)
  std::string technology;
};

struct HostLinkParams {
  uint32_t pcie_generation = 0;
  uint32_t lanes = 0;
  double efficiency = 0;
  double latency_s = 0;
  double pageable_efficiency = 0;
  // Derived: raw per-lane rate of the generation x lanes x encoding x efficiency, one direction.
  double bandwidth_bytes_per_s = 0;
};

struct DmaParams {
  uint32_t engines = 0;
  double d2d_latency_s = 0;
  // One engine's weight in the memory arbitration, where the whole cluster array weighs 1.
  double memory_weight = 0;
};

struct QueueParams {
  uint32_t hardware_queues = 0;
  int priority_least = 0;
  int priority_greatest = 0;
};

struct HostParams {
  double launch_overhead_s = 0;
  double memcpy_overhead_s = 0;
  double sync_overhead_s = 0;
  double event_overhead_s = 0;
  double alloc_overhead_s = 0;
  double query_overhead_s = 0;
};

struct DeviceParams {
  std::string preset;   // registry name or file the parameters came from
  std::string name;     // product name, e.g. "MLU370-X8"
  std::string vendor;
  ComputeParams compute;
  MemoryParams memory;
  HostLinkParams host_link;
  DmaParams dma;
  QueueParams queues;
  HostParams host;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
};

// The tiles a kernel is cut into (ClusterArray's rule): `given` if not 0, else tiles of about
// compute.tile_bytes of traffic or of compute.tile_cycles of one cluster's work, whichever
// gives more (1 .. 2^20). Plain arithmetic, for reports too.
uint32_t kernelTiles(const ComputeParams& c, KernelClass k, DType t, double flops,
                     double bytes, uint32_t given);

// Raw data rate of one PCIe lane in one direction, after line encoding, in bytes/s.
// Returns 0 for an unknown generation.
double pcieLaneBytesPerSecond(uint32_t generation);

}  // namespace cardsim::model
