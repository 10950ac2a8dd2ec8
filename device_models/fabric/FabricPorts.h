// The fabric ports of a device (of a card, in a card group) and of a node's switch plane:
// each lane of a link takes one at each end, and a port carries at most its bandwidth
// (FabricParams.ports, switch_ports, port_bandwidth; the cap is applied where the preset's
// link is read, simulator/FabricConfig).
#pragma once

#include <cstdint>
#include <string>

#include "device_models/fabric/FabricParams.h"

namespace cardsim::fabric {

// What is wrong with how the shape's links take the devices' and switches' ports ("" when
// they fit): e.g. a full mesh of 8 needs 7 x lanes ports per device.
// Also refuses a full mesh (or card group) past kMaxMeshDevices per node: its links grow as
// the square of its devices (a larger node is a switch, or more nodes).
std::string portShortage(const FabricParams& p);

constexpr uint32_t kMaxMeshDevices = 1024;

}  // namespace cardsim::fabric
