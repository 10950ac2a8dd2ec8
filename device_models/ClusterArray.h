// The card's compute clusters (Cambricon clusters, Biren SPCs, NVIDIA SMs). A kernel is
// split into tiles that run in waves over the clusters it holds. A tile's compute takes
// whole cycles of the preset clock at the cluster's share of the peak for the kernel's
// class and data type (matrix units for GEMMs, vector units otherwise) times the class's
// efficiency; each wave adds compute.wave_overhead cycles. A phase (the waves run while
// holding the same clusters) costs the memory latency plus the max of its compute and
// its traffic through the shared MemorySystem, rounded up to whole cycles. Concurrent
// kernels share clusters (granted by priority, then arrival) and memory bandwidth.
#pragma once

#include <deque>
#include <systemc>

#include "device_models/Command.h"
#include "device_models/DeviceParams.h"
#include "device_models/MemorySystem.h"
#include "device_models/SharedPipe.h"

namespace cardsim::model {

// Derived timing of a kernel running alone, for tests and reports.
struct KernelShape {
  uint32_t tiles = 0;
  double tile_compute_cycles = 0;  // one tile on one cluster
  double wave_cycles = 0;          // the tile's compute plus the per-wave overhead
  double tile_bytes = 0;
};

class ClusterArray : public sc_core::sc_module {
 public:
  ClusterArray(sc_core::sc_module_name name, const ComputeParams& params, MemorySystem& memory);

  // Runs the kernel's waves; returns when its last wave is done. Called from a
  // StreamQueue's thread. Dispatch latency is the caller's.
  void execute(const KernelCost& cost, int priority_rank, Waiter& waiter);

  KernelShape shape(const KernelCost& cost) const;
  const ComputeParams& params() const { return params_; }
  uint32_t freeClusters() const { return free_; }
  double busyClusterSeconds() const { return busy_cluster_s_; }

 private:
  struct Request {
    int rank;
    uint64_t order;
    uint32_t want;
    uint32_t granted;
    sc_core::sc_event* granted_event;
  };
  uint32_t acquire(uint32_t want, int rank, Waiter& waiter);
  void release(uint32_t n);

  ComputeParams params_;
  MemorySystem& memory_;
  uint32_t free_;
  uint64_t next_order_ = 0;
  std::deque<Request*> waiting_;
  double busy_cluster_s_ = 0;
};

}  // namespace cardsim::model
