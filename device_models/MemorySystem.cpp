#include "device_models/MemorySystem.h"

namespace cardsim::model {

MemorySystem::MemorySystem(sc_core::sc_module_name name, const MemoryParams& params)
    : sc_module(name), params_(params), pipe_(params.bandwidth_bytes_per_s) {
  SC_HAS_PROCESS(MemorySystem);
  SC_METHOD(onWake);
  sensitive << pipe_.wakeEvent();
  dont_initialize();
}

void MemorySystem::transferForClusters(double bytes, uint32_t clusters, uint32_t total_clusters,
                                       Waiter* w) {
  const double cap = params_.cluster_bandwidth_bytes_per_s > 0
                         ? params_.cluster_bandwidth_bytes_per_s * clusters
                         : FairShare::kNoCap;
  pipe_.start(bytes, static_cast<double>(clusters) / total_clusters, w, cap);
}

}  // namespace cardsim::model
