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
  for (Flow& f : flows_) {
    const double moved = std::min(f.remaining, f.rate * dt);
    f.remaining -= moved;
    bytes_moved_ += moved;
  }
}

void FairShare::add(double bytes, double weight, void* cookie, double cap_bytes_per_s) {
  flows_.push_back({bytes, weight > 0 ? weight : 1.0, cap_bytes_per_s > 0 ? cap_bytes_per_s : kNoCap,
                    0.0, cookie});
  assignRates();
}

void FairShare::assignRates() {
  // One resource, the bandwidth; each flow weighted and capped (the fabric's solver: a flow
  // whose cap is below its share takes its cap, the rest split the remainder by weight).
  solver_.reset(1);
  solver_.capacity()[0] = bytes_per_s_;
  for (const Flow& f : flows_) solver_.addFlowOn(0, f.weight, f.cap);
  solver_.solve();
  for (std::size_t i = 0; i < flows_.size(); ++i) flows_[i].rate = solver_.rates()[i];
}

double FairShare::secondsToNextFinish() const {
  double best = -1;
  for (const Flow& f : flows_) {
    const double t = f.remaining / f.rate;
    if (best < 0 || t < best) best = t;
  }
  return best;
}

const std::vector<void*>& FairShare::popFinished() {
  std::vector<void*>& done = done_;
  done.clear();
  auto it = std::remove_if(flows_.begin(), flows_.end(), [&](const Flow& f) {
    if (f.remaining > kDoneBytes) return false;
    done.push_back(f.cookie);
    return true;
  });
  flows_.erase(it, flows_.end());
  if (!done.empty()) assignRates();
  return done;
}

bool FairShare::remove(const void* cookie) {
  auto it = std::find_if(flows_.begin(), flows_.end(), [&](const Flow& f) { return f.cookie == cookie; });
  if (it == flows_.end()) return false;
  flows_.erase(it);
  assignRates();
  return true;
}

double FairShare::rateOf(const void* cookie) const {
  for (const Flow& f : flows_)
    if (f.cookie == cookie) return f.rate;
  return 0;
}

}  // namespace cardsim::model
