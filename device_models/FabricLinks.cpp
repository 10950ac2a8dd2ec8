#include "device_models/FabricLinks.h"

#include <algorithm>
#include <limits>

#include "device_models/SimTime.h"

namespace cardsim::model {
namespace {
// A flow within this many bytes of done is done: absorbs rounding of times to 1 ps.
constexpr double kDoneBytes = 1e-3;
}  // namespace

FabricLinks::FabricLinks(sc_core::sc_module_name name, fabric::Topology topology)
    : sc_module(name),
      topology_(std::move(topology)),
      solver_(topology_),
      taken_(topology_.linkCount(), 0.0),
      occupiers_(topology_.linkCount(), 0),
      capacity_(topology_.linkCount(), 0.0) {
  for (std::size_t l = 0; l < topology_.linkCount(); ++l) {
    const fabric::LinkId id{static_cast<uint32_t>(l)};
    by_name_.emplace(topology_.link(id).name, id);
    capacity_[l] = topology_.link(id).params.copyBandwidth();
  }
  SC_HAS_PROCESS(FabricLinks);
  SC_METHOD(onWake);
  sensitive << wake_;
  dont_initialize();
}

bool FabricLinks::joins(DeviceId a, DeviceId b) const {
  const std::size_t n = topology_.devices().size();
  return a != b && index(a) < n && index(b) < n;
}

double FabricLinks::latencySeconds(DeviceId src, DeviceId dst) const {
  return topology_.routeLatency(topology_.devices().at(index(src)), topology_.devices().at(index(dst)));
}

void FabricLinks::transfer(DeviceId src, DeviceId dst, double bytes, Waiter* w) {
  advance();
  const auto& path = topology_.route(topology_.devices().at(index(src)), topology_.devices().at(index(dst)));
  flows_.push_back({&path, bytes, 0.0, w});
  assignRates();
  reschedule();
}

void FabricLinks::occupy(const std::vector<std::pair<std::string, double>>& bytes_per_s, int sign) {
  advance();
  for (const auto& [link, rate] : bytes_per_s) {
    auto it = by_name_.find(link);
    if (it == by_name_.end()) continue;
    const std::size_t l = index(it->second);
    occupiers_[l] = sign > 0 ? occupiers_[l] + 1 : (occupiers_[l] > 0 ? occupiers_[l] - 1 : 0);
    // Their rates may sum past the bandwidth: copies then get nothing until some end.
    taken_[l] = occupiers_[l] == 0 ? 0.0 : taken_[l] + sign * rate;
    capacity_[l] = std::max(0.0, topology_.link(it->second).params.copyBandwidth() - taken_[l]);
  }
  assignRates();
  reschedule();
}

void FabricLinks::advance() {
  const double now = sc_core::sc_time_stamp().to_seconds();
  const double dt = now - now_s_;
  now_s_ = now;
  if (dt <= 0) return;
  for (Flow& f : flows_) f.remaining -= std::min(f.remaining, f.rate * dt);
}

void FabricLinks::assignRates() {
  std::vector<const std::vector<fabric::LinkId>*> paths;
  paths.reserve(flows_.size());
  for (const Flow& f : flows_) paths.push_back(f.path);
  const std::vector<double> rates = solver_.rates(paths, &capacity_);
  for (std::size_t i = 0; i < flows_.size(); ++i) flows_[i].rate = rates[i];
}

void FabricLinks::reschedule() {
  wake_.cancel();
  double best = -1;
  for (const Flow& f : flows_) {
    if (f.rate <= 0) continue;   // held by collectives: moves again when one ends (occupy)
    const double t = f.rate == std::numeric_limits<double>::infinity() ? 0.0 : f.remaining / f.rate;
    if (best < 0 || t < best) best = t;
  }
  if (best < 0) return;
  wake_.notify(toScTime(best));   // rounded up: the flow is really finished when we wake
}

void FabricLinks::onWake() {
  advance();
  std::vector<Waiter*> done;
  auto it = std::remove_if(flows_.begin(), flows_.end(), [&](const Flow& f) {
    if (f.remaining > kDoneBytes && f.rate != std::numeric_limits<double>::infinity()) return false;
    done.push_back(f.waiter);
    return true;
  });
  flows_.erase(it, flows_.end());
  if (!done.empty()) assignRates();
  for (Waiter* w : done) w->signal();
  reschedule();
}

}  // namespace cardsim::model
