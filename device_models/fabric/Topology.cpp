#include "device_models/fabric/Topology.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <stdexcept>

namespace cardsim::fabric {

NodeId Topology::addNode(NodeKind kind, std::string name, uint32_t group) {
  const NodeId id{static_cast<uint32_t>(nodes_.size())};
  Node n;
  n.kind = kind;
  n.name = std::move(name);
  n.group = group;
  nodes_.push_back(std::move(n));
  out_.emplace_back();
  if (kind == NodeKind::Device) devices_.push_back(id);
  routes_.clear();
  via_.clear();
  return id;
}

NodeId Topology::addSwitch(std::string name, double forwarding_latency_s, bool reduces, uint32_t group,
                           double reduction_efficiency) {
  if (!(reduction_efficiency > 0 && reduction_efficiency <= 1))
    throw std::invalid_argument("fabric: switch " + name + ": reduction efficiency must be in (0, 1], got " +
                                std::to_string(reduction_efficiency));
  const NodeId id = addNode(NodeKind::Switch, std::move(name), group);
  nodes_.back().forwarding_latency_s = forwarding_latency_s;
  nodes_.back().reduces = reduces;
  nodes_.back().reduction_efficiency = reduction_efficiency;
  return id;
}

NodeId Topology::addNic(std::string name, double per_message_s, uint32_t group) {
  if (!(per_message_s >= 0))
    throw std::invalid_argument("fabric: NIC " + name + ": time per message must be >= 0");
  const NodeId id = addNode(NodeKind::Nic, std::move(name), group);
  nodes_.back().forwarding_latency_s = per_message_s;
  return id;
}

void Topology::setCollectiveLatency(double s) {
  if (!(s >= 0 && s < 1)) throw std::invalid_argument("fabric: collective latency must be in [0, 1) s, got " + std::to_string(s));
  collective_latency_s_ = s;
}

LinkId Topology::addLink(NodeId from, NodeId to, const LinkParams& p) {
  if (index(from) >= nodes_.size() || index(to) >= nodes_.size() || from == to)
    throw std::invalid_argument("fabric: a link needs two different existing nodes");
  if (!(p.bandwidth_bytes_per_s > 0) || !(p.latency_s >= 0))
    throw std::invalid_argument("fabric: link " + node(from).name + "->" + node(to).name +
                                " needs a positive bandwidth and a non-negative latency");
  const LinkId id{static_cast<uint32_t>(links_.size())};
  links_.push_back(Link{from, to, p, node(from).name + "->" + node(to).name});
  out_[index(from)].push_back(id);
  routes_.clear();
  via_.clear();
  return id;
}

void Topology::connect(NodeId a, NodeId b, const LinkParams& p) {
  addLink(a, b, p);
  addLink(b, a, p);
}

const std::vector<uint32_t>& Topology::routesFrom(NodeId src) const {
  auto& via = via_[index(src)];
  if (!via.empty()) return via;
  // Breadth-first over links in id order: the fewest hops, ties to the lowest link ids.
  // Devices other than the source do not forward. One search per source serves every
  // destination (an all-to-all over 1024 ranks asks for a million routes).
  via.assign(nodes_.size(), kNoLink);
  std::deque<NodeId> todo{src};
  via[index(src)] = kNoLink - 1;
  while (!todo.empty()) {
    const NodeId n = todo.front();
    todo.pop_front();
    if (n != src && node(n).kind == NodeKind::Device) continue;
    for (LinkId l : out_[index(n)]) {
      const NodeId t = links_[index(l)].to;
      if (via[index(t)] != kNoLink) continue;
      via[index(t)] = index(l);
      todo.push_back(t);
    }
  }
  return via;
}

const std::vector<LinkId>& Topology::route(NodeId src, NodeId dst) const {
  const uint64_t key = (static_cast<uint64_t>(index(src)) << 32) | index(dst);
  if (auto it = routes_.find(key); it != routes_.end()) return it->second;
  std::vector<LinkId> path;
  if (src != dst) {
    if (via_.size() < nodes_.size()) via_.resize(nodes_.size());
    const std::vector<uint32_t>& via = routesFrom(src);
    if (via[index(dst)] == kNoLink)
      throw std::invalid_argument("fabric: no route from " + node(src).name + " to " + node(dst).name);
    for (NodeId n = dst; n != src;) {
      const LinkId l{via[index(n)]};
      path.push_back(l);
      n = links_[index(l)].from;
    }
    std::reverse(path.begin(), path.end());
  }
  return routes_.emplace(key, std::move(path)).first->second;
}

double Topology::routeLatency(NodeId src, NodeId dst) const {
  double s = 0;
  for (LinkId l : route(src, dst)) {
    s += link(l).params.latency_s;
    const Node& to = node(link(l).to);
    if (to.kind != NodeKind::Device) s += to.forwarding_latency_s;
  }
  return s;
}

double Topology::routeBandwidth(NodeId src, NodeId dst) const {
  double b = std::numeric_limits<double>::infinity();
  for (LinkId l : route(src, dst)) b = std::min(b, link(l).params.bandwidth_bytes_per_s);
  return b;
}

bool Topology::singleSwitchOf(NodeId device, NodeId* sw) const {
  // Its links to its NIC (the way out of its node) aside: on a fabric of several nodes each
  // device also reaches the leaf switch through one.
  bool found = false;
  NodeId first{};
  for (LinkId l : out_.at(index(device))) {
    const NodeId to = links_[index(l)].to;
    if (node(to).kind == NodeKind::Nic) continue;
    if (node(to).kind != NodeKind::Switch || (found && to != first)) return false;
    first = to;
    found = true;
  }
  if (found) *sw = first;
  return found;
}

Topology fullMesh(uint32_t devices, const LinkParams& link) {
  Topology t;
  for (uint32_t d = 0; d < devices; ++d) t.addNode(NodeKind::Device, "dev" + std::to_string(d));
  for (uint32_t a = 0; a < devices; ++a)
    for (uint32_t b = a + 1; b < devices; ++b) t.connect(NodeId{a}, NodeId{b}, link);
  return t;
}

Topology switchStar(uint32_t devices, const LinkParams& link, double switch_latency_s,
                    bool in_switch_reduction, double reduction_efficiency) {
  Topology t;
  for (uint32_t d = 0; d < devices; ++d) t.addNode(NodeKind::Device, "dev" + std::to_string(d));
  const NodeId sw = t.addSwitch("sw0", switch_latency_s, in_switch_reduction, 0, reduction_efficiency);
  for (uint32_t d = 0; d < devices; ++d) t.connect(NodeId{d}, sw, link);
  return t;
}

Topology cardGroup(uint32_t cards, uint32_t chips_per_card, const LinkParams& on_card,
                   const LinkParams& between_cards, double port_latency_s) {
  Topology t;
  for (uint32_t d = 0; d < cards * chips_per_card; ++d)
    t.addNode(NodeKind::Device, "card" + std::to_string(d / chips_per_card) + ".chip" +
                                    std::to_string(d % chips_per_card));
  std::vector<NodeId> ports;
  for (uint32_t c = 0; c < cards; ++c) {
    ports.push_back(t.addSwitch("card" + std::to_string(c) + ".ports", port_latency_s, false));
    for (uint32_t k = 0; k < chips_per_card; ++k) t.connect(NodeId{c * chips_per_card + k}, ports.back(), on_card);
  }
  for (uint32_t a = 0; a < cards; ++a)
    for (uint32_t b = a + 1; b < cards; ++b) t.connect(ports[a], ports[b], between_cards);
  return t;
}

Topology multiNode(uint32_t nodes, const Topology& per_node, const NicParams& nic,
                   double leaf_latency_s, double oversubscription) {
  if (!(oversubscription >= 1))
    throw std::invalid_argument("fabric: oversubscription must be >= 1, got " + std::to_string(oversubscription));
  Topology t;
  t.setCollectiveLatency(per_node.collectiveLatency());
  const uint32_t per = static_cast<uint32_t>(per_node.devices().size());
  const uint32_t count = static_cast<uint32_t>(per_node.nodeCount());
  // node k's copy of each of per_node's nodes; devices first, so that device rank r is
  // devices()[r] (node-major).
  std::vector<std::vector<NodeId>> copy(nodes, std::vector<NodeId>(count));
  std::vector<std::vector<NodeId>> ports;   // per node: each device's port (NICs on the switch)
  const bool nic_on_ports = nic.on_switch && nodes > 1;
  for (uint32_t k = 0; k < nodes; ++k)
    for (uint32_t i = 0; i < count; ++i)
      if (per_node.node(NodeId{i}).kind == NodeKind::Device)
        copy[k][i] = t.addNode(NodeKind::Device, "node" + std::to_string(k) + "." + per_node.node(NodeId{i}).name, k);
  for (uint32_t k = 0; k < nodes; ++k) {
    for (uint32_t i = 0; i < count; ++i) {
      const Node& src = per_node.node(NodeId{i});
      const std::string name = "node" + std::to_string(k) + "." + src.name;
      if (src.kind == NodeKind::Switch)
        copy[k][i] = t.addSwitch(name, src.forwarding_latency_s, src.reduces, k, src.reduction_efficiency);
      else if (src.kind == NodeKind::Nic) copy[k][i] = t.addNic(name, src.forwarding_latency_s, k);
    }
    // A NIC on the node's switch (a PCIe switch) is reached over the device's own link to
    // it: each device's link ends at a port of its own (no latency on the port's side), on
    // which the NIC also sits, so the device's peer and network traffic share that link.
    std::vector<NodeId> port(count);
    if (nic_on_ports)
      for (uint32_t i = 0; i < count; ++i)
        if (per_node.node(NodeId{i}).kind == NodeKind::Device)
          port[i] = t.addSwitch("node" + std::to_string(k) + "." + per_node.node(NodeId{i}).name + ".port", 0, false, k);
    for (uint32_t l = 0; l < per_node.linkCount(); ++l) {
      const Link& src = per_node.link(LinkId{l});
      const bool from_device = per_node.node(src.from).kind == NodeKind::Device;
      const bool to_device = per_node.node(src.to).kind == NodeKind::Device;
      if (nic_on_ports && from_device != to_device) {
        const uint32_t d = from_device ? index(src.from) : index(src.to);
        const LinkParams inner{src.params.bandwidth_bytes_per_s, 0};
        if (from_device) {
          t.addLink(copy[k][d], port[d], src.params);
          t.addLink(port[d], copy[k][index(src.to)], inner);
        } else {
          t.addLink(copy[k][index(src.from)], port[d], inner);
          t.addLink(port[d], copy[k][d], src.params);
        }
        continue;
      }
      t.addLink(copy[k][index(src.from)], copy[k][index(src.to)], src.params);
    }
    ports.push_back(std::move(port));
  }
  if (nodes > 1) {
    const NodeId spine = t.addSwitch("spine", leaf_latency_s, false);
    const LinkParams host{nic.host_bandwidth_bytes_per_s > 0 ? nic.host_bandwidth_bytes_per_s
                                                             : nic.link.bandwidth_bytes_per_s,
                          nic.host_latency_s};
    const LinkParams up{nic.link.bandwidth_bytes_per_s * per / oversubscription, nic.link.latency_s};
    const double per_message_s = nic.message_rate_per_s > 0 ? 1 / nic.message_rate_per_s : 0;
    for (uint32_t k = 0; k < nodes; ++k) {
      const NodeId leaf = t.addSwitch("node" + std::to_string(k) + ".leaf", leaf_latency_s, false, k);
      uint32_t dev = 0;
      for (uint32_t i = 0; i < count; ++i) {
        if (per_node.node(NodeId{i}).kind != NodeKind::Device) continue;
        const NodeId n = t.addNic("node" + std::to_string(k) + ".nic" + std::to_string(dev++), per_message_s, k);
        t.connect(nic_on_ports ? ports[k][i] : copy[k][i], n, host);
        t.connect(n, leaf, nic.link);
      }
      t.connect(leaf, spine, up);
    }
  }
  return t;
}

}  // namespace cardsim::fabric
