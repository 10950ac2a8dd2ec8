#include "device_models/ClusterArray.h"

#include <algorithm>
#include <cmath>

#include "device_models/SimTime.h"

namespace cardsim::model {
namespace {
// Waits are rounded up to the picosecond, a few per phase: forgive that much before
// counting a started cycle.
constexpr double kRoundingSlackS = 3e-12;
}  // namespace

ClusterArray::ClusterArray(sc_core::sc_module_name name, const ComputeParams& params,
                           MemorySystem& memory)
    : sc_module(name), params_(params), memory_(memory), free_(params.clusters) {}

KernelShape ClusterArray::shape(const KernelCost& cost) const {
  const double peak = peakFor(params_, cost.kernel_class, cost.dtype);
  const double eff = params_.efficiency[static_cast<size_t>(cost.kernel_class)];
  const double bytes = cost.bytes_read + cost.bytes_written;
  KernelShape s;
  s.tiles = kernelTiles(params_, cost.kernel_class, cost.dtype, cost.flops, bytes, cost.tiles);
  // A cluster's share of the peak, per cycle of the preset clock; a tile takes whole cycles.
  const double ops_per_cycle = peak * eff / params_.clusters / params_.clock_hz;
  if (cost.flops > 0 && ops_per_cycle > 0) {
    const double cycles = cost.flops / s.tiles / ops_per_cycle;
    s.tile_compute_cycles = std::ceil(cycles - 1e-9 * cycles);
  }
  s.wave_cycles = s.tile_compute_cycles + params_.wave_overhead_cycles;
  s.tile_bytes = bytes / s.tiles;
  return s;
}

void ClusterArray::execute(const KernelCost& cost, int priority_rank, Waiter& waiter) {
  const KernelShape s = shape(cost);
  const double cycle_s = 1.0 / params_.clock_hz;
  uint64_t remaining = s.tiles;
  const double latency = memory_.params().latency_s;
  while (remaining > 0) {
    const uint32_t useful = static_cast<uint32_t>(std::min<uint64_t>(remaining, params_.clusters));
    const uint32_t held = acquire(useful, priority_rank, waiter);
    // Holding every cluster it can use, the kernel runs all its full waves in one phase;
    // with fewer, one wave at a time so it can pick up clusters others free.
    const uint64_t waves = held == useful ? remaining / held : 1;
    const uint64_t phase_tiles = waves * held;
    const double compute_s = static_cast<double>(waves) * s.wave_cycles * cycle_s;
    const double phase_bytes = static_cast<double>(phase_tiles) * s.tile_bytes;
    const sc_core::sc_time start = sc_core::sc_time_stamp();
    if (latency > 0) sc_core::wait(toScTime(latency));
    if (phase_bytes > 0) {
      waiter.pending = 1;
      memory_.transferForClusters(phase_bytes, held, params_.clusters, &waiter);
    }
    if (compute_s > 0) sc_core::wait(toScTime(compute_s));
    if (phase_bytes > 0 && waiter.pending > 0) sc_core::wait(waiter.done);
    // The phase holds its clusters for a whole number of cycles.
    const double elapsed = (sc_core::sc_time_stamp() - start).to_seconds();
    const double whole = std::ceil((elapsed - kRoundingSlackS) / cycle_s) * cycle_s;
    if (whole > elapsed) sc_core::wait(toScTime(whole - elapsed));
    busy_cluster_s_ += (sc_core::sc_time_stamp() - start).to_seconds() * held;
    release(held);
    remaining -= phase_tiles;
  }
}

uint32_t ClusterArray::acquire(uint32_t want, int rank, Waiter& waiter) {
  const bool someone_ahead = std::any_of(waiting_.begin(), waiting_.end(),
                                         [&](const Request* r) { return r->rank <= rank; });
  if (free_ > 0 && !someone_ahead) {
    const uint32_t n = std::min(want, free_);
    free_ -= n;
    return n;
  }
  Request req{rank, next_order_++, want, 0, &waiter.done};
  auto pos = std::find_if(waiting_.begin(), waiting_.end(), [&](const Request* r) {
    return r->rank > rank;
  });
  waiting_.insert(pos, &req);
  while (req.granted == 0) sc_core::wait(waiter.done);
  return req.granted;
}

void ClusterArray::release(uint32_t n) {
  free_ += n;
  while (free_ > 0 && !waiting_.empty()) {
    Request* r = waiting_.front();
    waiting_.pop_front();
    r->granted = std::min(r->want, free_);
    free_ -= r->granted;
    r->granted_event->notify(sc_core::SC_ZERO_TIME);
  }
}

}  // namespace cardsim::model
