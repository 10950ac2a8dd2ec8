// Weighted max-min sharing of one bandwidth among concurrent transfers: each active flow
// gets bandwidth * weight / sum(weights), except that a flow never gets more than its own
// cap; what a capped flow leaves goes to the others in proportion to their weights
// (water-filling, by the fabric's max-min solver, fabric::MaxMinFair, on one resource).
// Plain arithmetic, no SystemC, so that it is unit-testable; MemorySystem and HostLink
// drive it from simulated time.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "device_models/fabric/MaxMinFair.h"

namespace cardsim::model {

class FairShare {
 public:
  static constexpr double kNoCap = std::numeric_limits<double>::infinity();

  explicit FairShare(double bytes_per_s) : bytes_per_s_(bytes_per_s) {}

  // Progresses every flow to time `now_s`. Must be called before add() and popFinished().
  void advanceTo(double now_s);
  // Starts a flow of `weight` (> 0) that never moves faster than `cap_bytes_per_s`;
  // `cookie` comes back from popFinished().
  void add(double bytes, double weight, void* cookie, double cap_bytes_per_s = kNoCap);
  // Seconds from the last advanceTo() until the next flow finishes; < 0 when idle.
  double secondsToNextFinish() const;
  // Removes and returns the flows finished by the last advanceTo() (valid until the next call).
  const std::vector<void*>& popFinished();
  // Drops the flow added with `cookie`, finished or not (its moved bytes stay counted);
  // false if there is none.
  bool remove(const void* cookie);
  // The current rate of the flow added with `cookie` (0 if none), for tests and reports.
  double rateOf(const void* cookie) const;

  std::size_t active() const { return flows_.size(); }
  double bytesPerSecond() const { return bytes_per_s_; }
  double bytesMoved() const { return bytes_moved_; }
  double busySeconds() const { return busy_s_; }

 private:
  struct Flow {
    double remaining;
    double weight;
    double cap;
    double rate;
    void* cookie;
  };
  void assignRates();

  double bytes_per_s_;
  double now_s_ = 0;
  double bytes_moved_ = 0;
  double busy_s_ = 0;
  std::vector<Flow> flows_;
  // Kept between calls (a copy or kernel changes the flows several times each).
  fabric::MaxMinFair solver_;
  std::vector<void*> done_;
};

}  // namespace cardsim::model
