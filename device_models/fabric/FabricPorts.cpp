#include "device_models/fabric/FabricPorts.h"

#include <algorithm>
#include <cstdint>

namespace cardsim::fabric {

std::string portShortage(const FabricParams& p) {
  const uint64_t lanes = std::max<uint32_t>(1, p.link_lanes);
  const auto lanesOf = [&](uint64_t links) {
    return std::to_string(links) + " link(s) x " + std::to_string(lanes) + " lane(s) = " +
           std::to_string(links * lanes) + " ports";
  };
  if ((p.shape == NodeShape::FullMesh || p.shape == NodeShape::CardGroup) && p.devices_per_node > kMaxMeshDevices)
    return std::string("a ") + shapeName(p.shape) + " of " + std::to_string(p.devices_per_node) +
           " devices per node (devices_per_node) is past this shape's " + std::to_string(kMaxMeshDevices) +
           ": its links grow as the square of its devices; use more nodes (fabric.nodes, CARDSIM_NODES) or a "
           "switch (fabric.shape)";
  if (p.ports > 0) {
    // What one device (card) of the shape wires into the fabric.
    uint64_t links = 1;
    std::string whose = "device";
    if (p.shape == NodeShape::FullMesh) links = p.devices_per_node > 0 ? p.devices_per_node - 1 : 0;
    if (p.shape == NodeShape::CardGroup) {
      const uint32_t cards = p.chips_per_card > 0 ? p.devices_per_node / p.chips_per_card : 0;
      links = cards > 0 ? cards - 1 : 0;
      whose = "card";
    }
    if (links * lanes > p.ports)
      return "each " + whose + " of a " + shapeName(p.shape) + " of " + std::to_string(p.devices_per_node) +
             " devices needs " + lanesOf(links) + ", more than its " + std::to_string(p.ports) + " (fabric.ports)";
  }
  if (p.switch_ports > 0 && p.shape == NodeShape::SwitchStar &&
      uint64_t{p.devices_per_node} * lanes > p.switch_ports)
    return "the switch of " + std::to_string(p.devices_per_node) + " devices needs " + lanesOf(p.devices_per_node) +
           ", more than its " + std::to_string(p.switch_ports) + " (fabric.switch_ports)";
  return "";
}

}  // namespace cardsim::fabric
