// Weighted max-min fair sharing of resources (links, a memory system, a PCIe link) among
// flows, by progressive filling: every unfixed flow's rate grows in proportion to its
// weight until a resource it crosses is full or it reaches its own cap; those flows are
// fixed at that rate, take it off their resources, and the others go on. The one solver of
// the project: the fabric's flows (FlowSolver, FabricLinks) and the device model's shared
// bandwidths (FairShare: memory, host link) call it. Plain arithmetic, no SystemC.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace cardsim::fabric {

class MaxMinFair {
 public:
  static constexpr double kNoCap = std::numeric_limits<double>::infinity();

  // Starts a new problem over `resources` resources (their capacities set with capacity()).
  void reset(std::size_t resources);
  std::vector<double>& capacity() { return capacity_; }
  // A flow crossing `count` resources (their indices), of `weight` > 0, never faster than
  // `cap` bytes/s. A flow crossing none moves at its cap (unbounded when uncapped).
  void addFlow(const uint32_t* resources, std::size_t count, double weight = 1, double cap = kNoCap);
  void addFlowOn(uint32_t resource, double weight = 1, double cap = kNoCap) { addFlow(&resource, 1, weight, cap); }
  std::size_t flows() const { return weight_.size(); }

  // Solves the problem: rates()[f] is flow f's rate; capacity() is left with what the
  // flows do not take (at least 0).
  void solve();
  const std::vector<double>& rates() const { return rate_; }

 private:
  std::vector<double> capacity_;
  std::vector<uint32_t> resources_;   // every flow's resources, flow after flow
  std::vector<std::size_t> first_;     // flow f's: resources_[first_[f] .. first_[f + 1])
  std::vector<double> weight_, cap_, rate_;
  // Scratch, kept between solves (the device model solves at every kernel and copy).
  std::vector<double> weight_on_;      // per resource: the weights of its unfixed flows
  std::vector<uint32_t> users_;        // per resource: its unfixed flows
  std::vector<uint32_t> unfixed_;      // flows not yet fixed
};

}  // namespace cardsim::fabric
