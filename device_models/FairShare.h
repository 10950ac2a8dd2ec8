// Weighted processor sharing of one bandwidth among concurrent transfers: each active
// flow gets bandwidth * weight / sum(weights). Plain arithmetic, no SystemC, so that it
// is unit-testable; MemoryChannel and HostLink drive it from simulated time.
#pragma once

#include <cstdint>
#include <vector>

namespace cardsim::model {

class FairShare {
 public:
  explicit FairShare(double bytes_per_s) : bytes_per_s_(bytes_per_s) {}

  // Progresses every flow to time `now_s`. Must be called before add() and popFinished().
  void advanceTo(double now_s);
  // Starts a flow; `cookie` comes back from popFinished().
  void add(double bytes, double weight, void* cookie);
  // Seconds from the last advanceTo() until the next flow finishes; < 0 when idle.
  double secondsToNextFinish() const;
  // Removes and returns the flows finished by the last advanceTo().
  std::vector<void*> popFinished();

  std::size_t active() const { return flows_.size(); }
  double bytesPerSecond() const { return bytes_per_s_; }
  double bytesMoved() const { return bytes_moved_; }
  double busySeconds() const { return busy_s_; }

 private:
  struct Flow {
    double remaining;
    double weight;
    void* cookie;
  };
  double bytes_per_s_;
  double now_s_ = 0;
  double total_weight_ = 0;
  double bytes_moved_ = 0;
  double busy_s_ = 0;
  std::vector<Flow> flows_;
};

}  // namespace cardsim::model
