// A NIC: the device's way out of its node (a host hop to it, then its link to the node's
// leaf switch). Every transfer crossing a NIC is one message and spends 1 / message_rate
// there (Topology::addNic); multiNode wires one per device.
#pragma once

#include "device_models/fabric/Link.h"

namespace cardsim::fabric {

struct NicParams {
  LinkParams link;                          // NIC <-> leaf switch, one direction
  double host_latency_s = 0;                // device <-> NIC (PCIe hop)
  double host_bandwidth_bytes_per_s = 0;    // 0: the NIC's own
  double message_rate_per_s = 0;            // 0: no limit; else each transfer spends 1/rate in each NIC
  // The NIC sits on the node's (PCIe) switch: a device reaches it over its own link to the
  // switch, shared with its peer traffic, then the host hop; else the host hop is the
  // device's own path to its NIC (NVLink systems: their PCIe, apart from the fabric).
  bool on_switch = false;
};

}  // namespace cardsim::fabric
