#include "device_models/ClusterArray.h"

#include <algorithm>
#include <cmath>

#include "device_models/SimTime.h"

namespace cardsim::model {

ClusterArray::ClusterArray(sc_core::sc_module_name name, const ComputeParams& params,
                           MemoryChannel& memory)
    : sc_module(name), params_(params), memory_(memory), free_(params.clusters) {}

KernelShape ClusterArray::shape(const KernelCost& cost) const {
  const double peak = params_.peak_ops_per_s[static_cast<size_t>(cost.dtype)];
  const double eff = params_.efficiency[static_cast<size_t>(cost.kernel_class)];
  const double bytes = cost.bytes_read + cost.bytes_written;
  KernelShape s;
  s.tiles = cost.tiles;
  if (s.tiles == 0) {
    // Tiles of about tile_bytes of traffic, or of as much work as that traffic would take
    // at the ridge point, whichever gives more tiles.
    const double ridge_ops_per_byte = peak * eff / memory_.params().bandwidth_bytes_per_s;
    const double by_bytes = std::ceil(bytes / params_.tile_bytes);
    const double by_work = std::ceil(cost.flops / (params_.tile_bytes * ridge_ops_per_byte));
    s.tiles = static_cast<uint32_t>(std::clamp(std::max(by_bytes, by_work), 1.0, 1048576.0));
  }
  const double per_cluster = peak * eff / params_.clusters;
  s.tile_compute_s = cost.flops > 0 ? cost.flops / s.tiles / per_cluster : 0;
  s.tile_bytes = bytes / s.tiles;
  return s;
}

void ClusterArray::execute(const KernelCost& cost, int priority_rank, Waiter& waiter) {
  const KernelShape s = shape(cost);
  uint64_t remaining = s.tiles;
  const double latency = memory_.params().latency_s;
  while (remaining > 0) {
    const uint32_t useful = static_cast<uint32_t>(std::min<uint64_t>(remaining, params_.clusters));
    const uint32_t held = acquire(useful, priority_rank, waiter);
    // Holding every cluster it can use, the kernel runs all its full waves in one phase;
    // with fewer, one wave at a time so it can pick up clusters others free.
    const uint64_t waves = held == useful ? remaining / held : 1;
    const uint64_t phase_tiles = waves * held;
    const double compute_s = static_cast<double>(waves) * s.tile_compute_s;
    const double phase_bytes = static_cast<double>(phase_tiles) * s.tile_bytes;
    const sc_core::sc_time start = sc_core::sc_time_stamp();
    if (latency > 0) sc_core::wait(toScTime(latency));
    if (phase_bytes > 0) {
      waiter.pending = 1;
      memory_.transfer(phase_bytes, held, &waiter);
    }
    if (compute_s > 0) sc_core::wait(toScTime(compute_s));
    if (phase_bytes > 0 && waiter.pending > 0) sc_core::wait(waiter.done);
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
