#include "device_models/fabric/MaxMinFair.h"

#include <algorithm>

namespace cardsim::fabric {

void MaxMinFair::reset(std::size_t resources) {
  capacity_.assign(resources, 0);
  resources_.clear();
  first_.assign(1, 0);
  weight_.clear();
  cap_.clear();
  rate_.clear();
}

void MaxMinFair::addFlow(const uint32_t* resources, std::size_t count, double weight, double cap) {
  resources_.insert(resources_.end(), resources, resources + count);
  first_.push_back(resources_.size());
  weight_.push_back(weight > 0 ? weight : 1.0);
  cap_.push_back(cap > 0 ? cap : kNoCap);
}

void MaxMinFair::solve() {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // Levels within this relative distance of the bottleneck's are the same level: flows on
  // links that rounding left a hair apart are fixed together.
  constexpr double kSameLevel = 1 + 1e-12;
  const std::size_t nf = weight_.size();
  rate_.assign(nf, kInf);
  weight_on_.assign(capacity_.size(), 0);
  users_.assign(capacity_.size(), 0);
  unfixed_.clear();
  for (std::size_t f = 0; f < nf; ++f) {
    if (first_[f] == first_[f + 1]) {
      rate_[f] = cap_[f];   // on no shared resource: its own cap (a device to itself: at once)
      continue;
    }
    unfixed_.push_back(static_cast<uint32_t>(f));
    for (std::size_t k = first_[f]; k < first_[f + 1]; ++k) {
      weight_on_[resources_[k]] += weight_[f];
      ++users_[resources_[k]];
    }
  }
  while (!unfixed_.empty()) {
    // The bottleneck level (rate per unit of weight): the fullest resource's share, or the
    // lowest cap.
    double level = kInf;
    for (std::size_t r = 0; r < capacity_.size(); ++r)
      if (users_[r] > 0) level = std::min(level, capacity_[r] / weight_on_[r]);
    for (uint32_t f : unfixed_) level = std::min(level, cap_[f] / weight_[f]);
    std::size_t kept = 0;
    for (uint32_t f : unfixed_) {
      const bool capped = cap_[f] / weight_[f] <= level * kSameLevel;
      bool full = false;
      for (std::size_t k = first_[f]; k < first_[f + 1] && !full; ++k) {
        const uint32_t r = resources_[k];
        full = users_[r] > 0 && capacity_[r] / weight_on_[r] <= level * kSameLevel;
      }
      if (!capped && !full) {
        unfixed_[kept++] = f;
        continue;
      }
      rate_[f] = capped ? cap_[f] : level * weight_[f];
      for (std::size_t k = first_[f]; k < first_[f + 1]; ++k) {
        const uint32_t r = resources_[k];
        capacity_[r] = std::max(0.0, capacity_[r] - rate_[f]);
        weight_on_[r] = --users_[r] == 0 ? 0 : weight_on_[r] - weight_[f];
      }
    }
    unfixed_.resize(kept);
  }
}

}  // namespace cardsim::fabric
