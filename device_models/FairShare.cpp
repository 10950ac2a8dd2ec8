#include "device_models/FairShare.h"

#include <algorithm>

namespace cardsim::model {
namespace {
// A flow within this many bytes of done is done: absorbs rounding of times to 1 ps.
constexpr double kDoneBytes = 1e-3;
}  // namespace

void FairShare::advanceTo(double now_s) {
  const double dt = now_s - now_s_;
  now_s_ = now_s;
  if (dt <= 0 || flows_.empty()) return;
  busy_s_ += dt;
  const double per_weight = bytes_per_s_ * dt / total_weight_;
  for (Flow& f : flows_) {
    const double moved = std::min(f.remaining, per_weight * f.weight);
    f.remaining -= moved;
    bytes_moved_ += moved;
  }
}

void FairShare::add(double bytes, double weight, void* cookie) {
  flows_.push_back({bytes, weight > 0 ? weight : 1.0, cookie});
  total_weight_ += flows_.back().weight;
}

double FairShare::secondsToNextFinish() const {
  if (flows_.empty()) return -1;
  double best = -1;
  for (const Flow& f : flows_) {
    const double t = f.remaining * total_weight_ / (bytes_per_s_ * f.weight);
    if (best < 0 || t < best) best = t;
  }
  return best;
}

std::vector<void*> FairShare::popFinished() {
  std::vector<void*> done;
  auto it = std::remove_if(flows_.begin(), flows_.end(), [&](const Flow& f) {
    if (f.remaining > kDoneBytes) return false;
    done.push_back(f.cookie);
    return true;
  });
  flows_.erase(it, flows_.end());
  total_weight_ = 0;
  for (const Flow& f : flows_) total_weight_ += f.weight;
  return done;
}

}  // namespace cardsim::model
