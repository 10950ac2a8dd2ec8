#include "device_models/fabric/FabricParams.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <utility>
#include <vector>

#include "device_models/fabric/FabricPorts.h"

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
  if (const std::string why = portShortage(p); !why.empty()) throw std::invalid_argument("fabric: " + why);
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

CollectiveRequest requestFor(const FabricParams& p) {
  CollectiveRequest r;
  r.channels = p.channels;
  r.chunk_bytes = p.chunk_bytes;
  r.switch_chunk_bytes = p.switch_chunk_bytes;
  r.switch_channels = p.switch_channels;
  r.library = p.library_algorithms;
  return r;
}

uint32_t nodesFor(const FabricParams& p, uint64_t devices) {
  const uint64_t per = std::max<uint32_t>(1, p.devices_per_node);
  return static_cast<uint32_t>(std::max<uint64_t>(p.nodes, (devices + per - 1) / per));
}

uint32_t nodesToBuild(const FabricParams& p, uint64_t devices) {
  const uint64_t per = std::max<uint32_t>(1, p.devices_per_node);
  const uint64_t needed = std::max<uint64_t>(1, (devices + per - 1) / per);
  return static_cast<uint32_t>(std::max<uint64_t>(needed, std::min<uint64_t>(p.nodes, 2)));
}

std::string fabricSignature(const FabricParams& p) {
  std::string out;
  const auto put = [&](const char* key, double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%.17g", v);
    out += std::string(out.empty() ? "" : "; ") + key + "=" + b;
  };
  out = std::string("shape=") + shapeName(p.shape);
  put("devices_per_node", p.devices_per_node);
  put("link.bandwidth", p.link.bandwidth_bytes_per_s);
  put("link.latency", p.link.latency_s);
  put("link.copy_bandwidth", p.link.copy_bandwidth_bytes_per_s);
  put("on_card.bandwidth", p.on_card.bandwidth_bytes_per_s);
  put("on_card.latency", p.on_card.latency_s);
  put("on_card.copy_bandwidth", p.on_card.copy_bandwidth_bytes_per_s);
  put("chips_per_card", p.chips_per_card);
  put("switch_latency", p.switch_latency_s);
  put("in_switch_reduction", p.in_switch_reduction ? 1 : 0);
  put("reduction_efficiency", p.reduction_efficiency);
  put("collective_latency", p.collective_latency_s);
  put("nic.bandwidth", p.nic.link.bandwidth_bytes_per_s);
  put("nic.latency", p.nic.link.latency_s);
  put("nic.host_latency", p.nic.host_latency_s);
  put("nic.host_bandwidth", p.nic.host_bandwidth_bytes_per_s);
  put("nic.message_rate", p.nic.message_rate_per_s);
  put("nic.on_switch", p.nic.on_switch ? 1 : 0);
  put("leaf_latency", p.leaf_latency_s);
  put("oversubscription", p.oversubscription);
  put("channels", p.channels);
  put("chunk", p.chunk_bytes);
  put("switch_chunk", p.switch_chunk_bytes);
  put("switch_channels", p.switch_channels);
  put("link.lanes", p.link_lanes);
  put("ports", p.ports);
  put("switch_ports", p.switch_ports);
  put("port_bandwidth", p.port_bandwidth_bytes_per_s);
  out += "; library_algorithms=";
  for (std::size_t i = 0; i < p.library_algorithms.size(); ++i) out += (i ? "," : "") + p.library_algorithms[i];
  return out;
}

std::string firstDifference(const std::string& a, const std::string& b) {
  const auto split = [](const std::string& s) {
    std::vector<std::pair<std::string, std::string>> kv;
    std::size_t at = 0;
    while (at < s.size()) {
      std::size_t end = s.find("; ", at);
      if (end == std::string::npos) end = s.size();
      const std::string item = s.substr(at, end - at);
      const std::size_t eq = item.find('=');
      kv.emplace_back(item.substr(0, eq), eq == std::string::npos ? "" : item.substr(eq + 1));
      at = end + 2;
    }
    return kv;
  };
  const auto x = split(a), y = split(b);
  for (std::size_t i = 0; i < std::max(x.size(), y.size()); ++i) {
    const auto l = i < x.size() ? x[i] : std::make_pair(std::string("?"), std::string("(none)"));
    const auto r = i < y.size() ? y[i] : std::make_pair(l.first, std::string("(none)"));
    if (l == r) continue;
    // Compared exactly, shown as people write them (3.33e10, not 33299999999.999996),
    // unless only the exact digits tell them apart.
    const auto shown = [](const std::string& v) {
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0') return v;
      char b[64];
      std::snprintf(b, sizeof b, "%.10g", d);
      return std::string(b);
    };
    const std::string ls = shown(l.second), rs = shown(r.second);
    return "fabric." + l.first + ": " + (ls != rs ? ls + " vs " + rs : l.second + " vs " + r.second);
  }
  return "";
}

}  // namespace cardsim::fabric
