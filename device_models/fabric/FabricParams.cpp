#include "device_models/fabric/FabricParams.h"

#include <stdexcept>

namespace cardsim::fabric {

namespace {
struct ShapeName {
  NodeShape shape;
  const char* name;
};
constexpr ShapeName kShapes[] = {
    {NodeShape::FullMesh, "full_mesh"}, {NodeShape::SwitchStar, "switch"}, {NodeShape::CardGroup, "card_group"}};
}  // namespace

const char* shapeName(NodeShape s) {
  for (const ShapeName& n : kShapes)
    if (n.shape == s) return n.name;
  return "?";
}

NodeShape parseShape(const std::string& name) {
  for (const ShapeName& n : kShapes)
    if (name == n.name) return n.shape;
  throw std::invalid_argument("unknown fabric shape '" + name + "' (valid: full_mesh, switch, card_group)");
}

Topology buildTopology(const FabricParams& p) {
  if (p.devices_per_node == 0) throw std::invalid_argument("fabric: devices_per_node must be at least 1");
  if (p.nodes == 0) throw std::invalid_argument("fabric: nodes must be at least 1");
  Topology node;
  switch (p.shape) {
    case NodeShape::FullMesh: node = fullMesh(p.devices_per_node, p.link); break;
    case NodeShape::SwitchStar:
      node = switchStar(p.devices_per_node, p.link, p.switch_latency_s, p.in_switch_reduction, p.reduction_efficiency);
      break;
    case NodeShape::CardGroup: {
      if (p.chips_per_card == 0 || p.devices_per_node % p.chips_per_card != 0)
        throw std::invalid_argument("fabric: devices_per_node (" + std::to_string(p.devices_per_node) +
                                    ") must be a multiple of chips_per_card (" + std::to_string(p.chips_per_card) + ")");
      node = cardGroup(p.devices_per_node / p.chips_per_card, p.chips_per_card, p.on_card, p.link, p.switch_latency_s);
      break;
    }
  }
  node.setCollectiveLatency(p.collective_latency_s);
  if (p.nodes == 1) return node;
  return multiNode(p.nodes, node, p.nic, p.leaf_latency_s, p.oversubscription);
}

}  // namespace cardsim::fabric
