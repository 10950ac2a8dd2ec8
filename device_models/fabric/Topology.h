// The collective fabric's graph: devices, switches and NICs joined by one-direction links,
// each with its bandwidth and latency. Routes are shortest paths by hop count (ties broken
// by the lower link id, so routes are deterministic); devices do not forward. Plain C++:
// the flow solver and the collective algorithms work on it; no SystemC.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "device_models/fabric/Link.h"
#include "device_models/fabric/Nic.h"

namespace cardsim::fabric {

enum class NodeKind : uint8_t { Device, Switch, Nic };

struct Node {
  NodeKind kind = NodeKind::Device;
  std::string name;
  double forwarding_latency_s = 0;    // switches, NICs: added to every route through them
  bool reduces = false;               // switches that reduce in the switch (multicast + sum)
  // Reducing switches: the fraction of the links' rate their reduction traffic reaches.
  // Multimem loads and stores (NVLS) move less payload per wire byte than bulk writes.
  double reduction_efficiency = 1;
  uint32_t group = 0;                 // the node (host) it belongs to
};

class Topology {
 public:
  NodeId addNode(NodeKind kind, std::string name, uint32_t group = 0);
  NodeId addSwitch(std::string name, double forwarding_latency_s, bool reduces, uint32_t group = 0,
                   double reduction_efficiency = 1);
  // A NIC that spends `per_message_s` (1 / its message rate) on every transfer crossing it.
  NodeId addNic(std::string name, double per_message_s, uint32_t group = 0);
  // Two links, one each way, of the same parameters.
  void connect(NodeId a, NodeId b, const LinkParams& p);
  LinkId addLink(NodeId from, NodeId to, const LinkParams& p);

  const Node& node(NodeId n) const { return nodes_.at(index(n)); }
  const Link& link(LinkId l) const { return links_.at(index(l)); }
  std::size_t nodeCount() const { return nodes_.size(); }
  std::size_t linkCount() const { return links_.size(); }
  // Devices in the order they were added: device rank r is devices()[r].
  const std::vector<NodeId>& devices() const { return devices_; }

  // The links from `src` to `dst` (empty when src == dst); throws if unreachable.
  const std::vector<LinkId>& route(NodeId src, NodeId dst) const;
  // Latency of a route: its links plus the forwarding latency of the switches and NICs it
  // crosses (a NIC's: its time per message).
  double routeLatency(NodeId src, NodeId dst) const;
  // The slowest link of a route (its bandwidth bounds a lone transfer).
  double routeBandwidth(NodeId src, NodeId dst) const;
  // The switch a device's links lead to, if every one of them (those to its NIC aside) goes
  // to one switch.
  bool singleSwitchOf(NodeId device, NodeId* sw) const;

  // Fixed cost of one collective call on these devices, whatever the algorithm: kernel
  // start, the library's setup and completion. Not a wire latency, so it is paid once per
  // collective, not per step (CollectiveEngine adds it).
  void setCollectiveLatency(double s);
  double collectiveLatency() const { return collective_latency_s_; }

 private:
  std::vector<Node> nodes_;
  std::vector<Link> links_;
  std::vector<std::vector<LinkId>> out_;   // per node: its outgoing links
  std::vector<NodeId> devices_;
  // Caches: per source, the link each node is reached by on the breadth-first tree (filled
  // on first use); per (source, destination), the route. References stay valid as they grow.
  static constexpr uint32_t kNoLink = 0xffffffffu;
  const std::vector<uint32_t>& routesFrom(NodeId src) const;
  mutable std::vector<std::vector<uint32_t>> via_;
  mutable std::unordered_map<uint64_t, std::vector<LinkId>> routes_;
  double collective_latency_s_ = 0;
};

// Builders for the shapes the presets describe.
// n devices, every pair joined by its own link (BLink full mesh).
Topology fullMesh(uint32_t devices, const LinkParams& link);
// n devices, each joined to one switch (NVSwitch-style: all of a device's links into the
// switch plane counted as one link of their summed bandwidth).
Topology switchStar(uint32_t devices, const LinkParams& link, double switch_latency_s,
                    bool in_switch_reduction, double reduction_efficiency = 1);
// Cards of `chips_per_card` chips (an MLU-Link bridge group): each chip joined by `on_card`
// to its card's fabric ports (a node that forwards in `port_latency_s`), and the cards'
// ports in a full mesh of `between_cards` links, so a card's links are shared by its chips.
Topology cardGroup(uint32_t cards, uint32_t chips_per_card, const LinkParams& on_card,
                   const LinkParams& between_cards, double port_latency_s = 0);

// Several nodes of one intra-node shape. Each device reaches the other nodes through its
// own NIC (a host hop, then the NIC's link to its node's leaf switch); the leaves meet at a
// spine whose link from each leaf carries the leaf's NICs' summed bandwidth divided by
// `oversubscription` (1: non-blocking, 2: half the bandwidth across nodes).
Topology multiNode(uint32_t nodes, const Topology& per_node, const NicParams& nic,
                   double leaf_latency_s, double oversubscription);

}  // namespace cardsim::fabric
