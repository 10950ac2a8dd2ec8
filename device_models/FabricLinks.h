// The fabric's links between the cards one process drives, in simulated time. A peer copy
// between two devices the fabric joins (chips of an MLU-Link group, BR100s in their BLink
// mesh, GPUs on an NVSwitch) moves over the fabric route between them instead of through
// both cards' PCIe links: it waits the route's latency, then its bytes cross every link of
// the route at the max-min fair rate among the copies under way (fabric::FlowSolver's rule,
// recomputed whenever a copy starts or ends). Device d of the process is device rank d of
// the topology, as a job's rank r is on the fabric server. A collective running on one of the
// cards takes its own traffic's rate off each link it crosses while it runs (its time is
// the fabric model's, agreed by its ranks); the copies share what is left.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <systemc>
#include <vector>

#include "device_models/Command.h"
#include "device_models/SharedPipe.h"
#include "device_models/fabric/FlowSolver.h"
#include "device_models/fabric/Topology.h"

namespace cardsim::model {

class FabricLinks : public sc_core::sc_module {
 public:
  FabricLinks(sc_core::sc_module_name name, fabric::Topology topology);

  // True when both devices are on the topology and distinct.
  bool joins(DeviceId a, DeviceId b) const;
  // The route's latency (its links and the switches it crosses), seconds.
  double latencySeconds(DeviceId src, DeviceId dst) const;
  // Starts moving `bytes` from src to dst; `w->pending` must already count this flow.
  void transfer(DeviceId src, DeviceId dst, double bytes, Waiter* w);
  // Takes `bytes_per_s` off each named link (a collective's traffic while it runs), or gives
  // it back with `sign` -1. Links this process's topology does not have are skipped.
  void occupy(const std::vector<std::pair<std::string, double>>& bytes_per_s, int sign);

 private:
  struct Flow {
    const std::vector<fabric::LinkId>* path;
    double remaining;
    double rate;
    Waiter* waiter;
  };
  void advance();
  void assignRates();
  void reschedule();
  void onWake();

  fabric::Topology topology_;
  fabric::FlowSolver solver_;
  std::map<std::string, fabric::LinkId> by_name_;
  std::vector<double> taken_;         // bytes/s collectives take, per link
  std::vector<uint32_t> occupiers_;   // collectives on each link (none: exactly 0 taken, no rounding left)
  // Bandwidth minus taken_, at least 0: the flow solver's capacities, kept up to date when a
  // collective starts or ends rather than rebuilt at every copy's start and end.
  std::vector<double> capacity_;
  std::vector<Flow> flows_;
  double now_s_ = 0;
  sc_core::sc_event wake_;
};

}  // namespace cardsim::model
