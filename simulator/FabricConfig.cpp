#include "simulator/FabricConfig.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "device_models/fabric/Algorithms.h"
#include "device_models/fabric/FabricPorts.h"
#include "simulator/Units.h"
#include "simulator/proto/config.pb.h"

namespace cardsim::sim {

namespace {

// Reads the fabric's quantities; only those the shape uses are required.
class FabricReader {
 public:
  explicit FabricReader(std::string origin) : origin_(std::move(origin)) {}

  double get(const config::Quantity& q, bool present, const std::string& key, Dimension dim, bool positive) {
    const std::string path = "device.fabric." + key;
    if (!present) {
      problems_.push_back(path + ": missing");
      return 0;
    }
    if (q.confidence() == config::CONFIDENCE_UNSET)
      problems_.push_back(path + ".confidence: missing (PUBLISHED, DERIVED or ASSUMED)");
    if ((q.confidence() == config::PUBLISHED || q.confidence() == config::DERIVED) && q.source().empty())
      problems_.push_back(path + ".source: missing for a " + config::Confidence_Name(q.confidence()) + " number");
    std::string why;
    auto v = parseQuantity(q.value(), dim, &why);
    if (!v) {
      problems_.push_back(path + ": " + why + " (expected a " + dimensionName(dim) + " like " +
                          dimensionExample(dim) + ")" + provenance(q));
      return 0;
    }
    if (positive && !(*v > 0))
      problems_.push_back(path + ": \"" + q.value() + "\" must be greater than 0" + provenance(q));
    if (!positive && *v < 0) problems_.push_back(path + ": \"" + q.value() + "\" must not be negative" + provenance(q));
    return *v;
  }
  uint32_t count(const config::Quantity& q, bool present, const std::string& key, uint32_t min_value) {
    const size_t before = problems_.size();
    const double v = get(q, present, key, Dimension::Count, false);
    if (problems_.size() != before) return min_value;   // already said what is wrong with it
    if (present && (v < min_value || v != std::floor(v) || v > 1e6)) {
      problems_.push_back("device.fabric." + key + ": \"" + q.value() + "\" must be a whole number of at least " +
                          std::to_string(min_value) + provenance(q));
      return min_value;
    }
    return static_cast<uint32_t>(v);
  }
  // `lanes`: set to the link's lane count; `port_cap` (bytes/s, 0: none): the most one
  // lane carries through its ports.
  fabric::LinkParams link(const config::FabricLink& l, bool present, const std::string& key, uint32_t* lanes = nullptr,
                          double port_cap = 0) {
    if (!present) {
      problems_.push_back("device.fabric." + key + ": missing");
      return {};
    }
    fabric::LinkParams p;
    p.bandwidth_bytes_per_s = get(l.bandwidth(), l.has_bandwidth(), key + ".bandwidth", Dimension::Bandwidth, true);
    const uint32_t n = l.has_lanes() ? count(l.lanes(), true, key + ".lanes", 1) : 1;
    if (lanes) *lanes = n;
    // The link's bandwidth is spread over its lanes; a lane runs no faster than its port.
    if (port_cap > 0) p.bandwidth_bytes_per_s = n * std::min(p.bandwidth_bytes_per_s / n, port_cap);
    p.latency_s = get(l.latency(), l.has_latency(), key + ".latency", Dimension::Time, false);
    const double raw = p.bandwidth_bytes_per_s;
    // One achieved-fraction figure per link type, applied to its bandwidth.
    if (l.has_efficiency())
      p.bandwidth_bytes_per_s *= get(l.efficiency(), true, key + ".efficiency", Dimension::Fraction, true);
    // Copy engines' own fraction (from the link's packet format), where the preset gives one.
    if (l.has_copy_efficiency())
      p.copy_bandwidth_bytes_per_s = raw * get(l.copy_efficiency(), true, key + ".copy_efficiency", Dimension::Fraction, true);
    return p;
  }
  void fail(const std::string& msg) { problems_.push_back(msg); }
  bool clean() const { return problems_.empty(); }
  // Which --set (or overrides file) gave a bad value, as the device's errors say.
  static std::string provenance(const config::Quantity& q) { return overrideNote(q); }
  void raise() const {
    if (problems_.empty()) return;
    std::string msg = origin_ + ": invalid fabric:";
    for (const auto& p : problems_) msg += "\n  " + p;
    throw ConfigError(msg);
  }

 private:
  std::string origin_;
  std::vector<std::string> problems_;
};

}  // namespace

fabric::FabricParams toFabricParams(const config::FabricConfig& f, const std::string& origin) {
  FabricReader x(origin);
  fabric::FabricParams p;
  try {
    p.shape = fabric::parseShape(f.shape());
  } catch (const std::invalid_argument& e) {
    x.fail(std::string("device.fabric.shape: ") + e.what());
  }
  p.devices_per_node = x.count(f.devices_per_node(), f.has_devices_per_node(), "devices_per_node", 1);
  if (f.has_port_bandwidth())
    p.port_bandwidth_bytes_per_s = x.get(f.port_bandwidth(), true, "port_bandwidth", Dimension::Bandwidth, true);
  if (f.has_ports()) p.ports = x.count(f.ports(), true, "ports", 1);
  if (f.has_switch_ports()) {
    p.switch_ports = x.count(f.switch_ports(), true, "switch_ports", 1);
    if (f.shape() != "switch") x.fail("device.fabric.switch_ports: only a 'switch' shape has a switch of its own");
  }
  p.link = x.link(f.link(), f.has_link(), "link", &p.link_lanes, p.port_bandwidth_bytes_per_s);
  if (p.shape == fabric::NodeShape::CardGroup) {
    p.on_card = x.link(f.on_card(), f.has_on_card(), "on_card");
    p.chips_per_card = x.count(f.chips_per_card(), f.has_chips_per_card(), "chips_per_card", 1);
    if (p.chips_per_card > 0 && p.devices_per_node % p.chips_per_card != 0)
      x.fail("device.fabric.chips_per_card: " + std::to_string(p.chips_per_card) + " does not divide devices_per_node (" +
             std::to_string(p.devices_per_node) + ")");
  }
  if (p.shape != fabric::NodeShape::FullMesh)
    p.switch_latency_s = x.get(f.switch_latency(), f.has_switch_latency(), "switch_latency", Dimension::Time, false);
  p.in_switch_reduction = f.in_switch_reduction();
  if (p.in_switch_reduction && p.shape != fabric::NodeShape::SwitchStar)
    x.fail("device.fabric.in_switch_reduction: only a 'switch' shape can reduce in the switch");
  // Read even when in_switch_reduction is off (e.g. overridden to false to model NVLS
  // disabled): the figure then describes a path that goes unused.
  if (f.has_reduction_efficiency())
    p.reduction_efficiency = x.get(f.reduction_efficiency(), true, "reduction_efficiency", Dimension::Fraction, true);
  if (f.has_collective_latency()) {
    p.collective_latency_s = x.get(f.collective_latency(), true, "collective_latency", Dimension::Time, false);
    if (p.collective_latency_s >= 1)
      x.fail("device.fabric.collective_latency: \"" + f.collective_latency().value() + "\" is not below 1 s");
  }
  p.nodes = f.has_nodes() ? x.count(f.nodes(), true, "nodes", 1) : 1;
  if (p.nodes > kMaxNodes) x.fail("device.fabric.nodes: \"" + f.nodes().value() + "\" is more than " +
                                  std::to_string(kMaxNodes) + " nodes");
  p.nodes_set = f.has_nodes();
  // Between nodes: only read when the preset describes it (a single-node preset may not).
  if (f.has_nic()) {
    const auto& n = f.nic();
    p.nic.link.bandwidth_bytes_per_s = x.get(n.bandwidth(), n.has_bandwidth(), "nic.bandwidth", Dimension::Bandwidth, true);
    p.nic.link.latency_s = x.get(n.latency(), n.has_latency(), "nic.latency", Dimension::Time, false);
    p.nic.host_latency_s = x.get(n.host_latency(), n.has_host_latency(), "nic.host_latency", Dimension::Time, false);
    if (n.has_host_bandwidth())
      p.nic.host_bandwidth_bytes_per_s = x.get(n.host_bandwidth(), true, "nic.host_bandwidth", Dimension::Bandwidth, true);
    p.nic.on_switch = n.on_switch();
    if (p.nic.on_switch && f.shape() != "switch")
      x.fail("device.fabric.nic.on_switch: only a 'switch' shape has a switch for its NICs to sit on");
    if (n.has_message_rate())
      p.nic.message_rate_per_s = x.get(n.message_rate(), true, "nic.message_rate", Dimension::Rate, true);
    p.leaf_latency_s = x.get(f.leaf_latency(), f.has_leaf_latency(), "leaf_latency", Dimension::Time, false);
    p.oversubscription = f.has_oversubscription()
                             ? x.get(f.oversubscription(), true, "oversubscription", Dimension::Number, true) : 1.0;
    if (p.oversubscription > 0 && p.oversubscription < 1)   // <= 0: said by get()
      x.fail("device.fabric.oversubscription: \"" + f.oversubscription().value() + "\" must be at least 1" +
             FabricReader::provenance(f.oversubscription()));
  }
  if (f.has_channels()) p.channels = x.count(f.channels(), true, "channels", 1);
  if (f.has_chunk()) p.chunk_bytes = x.get(f.chunk(), true, "chunk", Dimension::Bytes, false);
  if (f.has_switch_chunk()) p.switch_chunk_bytes = x.get(f.switch_chunk(), true, "switch_chunk", Dimension::Bytes, false);
  if (f.has_switch_channels()) p.switch_channels = x.count(f.switch_channels(), true, "switch_channels", 1);
  if (!f.algorithm().empty()) {
    try {
      p.algorithm = fabric::algorithm(f.algorithm()).name();
    } catch (const std::invalid_argument& e) {
      x.fail(std::string("device.fabric.algorithm: ") + e.what());
    }
  }
  if (!f.library_algorithms().empty()) {
    std::string item;
    std::stringstream in(f.library_algorithms());
    while (std::getline(in, item, ',')) {
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      // "name" or "name:across_nodes" (weighed for groups spanning nodes only)
      const std::size_t colon = item.find(':');
      const std::string scope = colon == std::string::npos ? std::string() : item.substr(colon + 1);
      try {
        if (!scope.empty() && scope != "across_nodes")
          throw std::invalid_argument("unknown scope '" + scope + "' of '" + item + "' (valid: across_nodes)");
        std::string name = fabric::algorithm(item.substr(0, colon)).name();
        if (!scope.empty()) name += ":" + scope;
        if (std::find(p.library_algorithms.begin(), p.library_algorithms.end(), name) == p.library_algorithms.end())
          p.library_algorithms.push_back(name);
      } catch (const std::invalid_argument& e) {
        x.fail("device.fabric.library_algorithms: \"" + f.library_algorithms() + "\": " + e.what());
      }
    }
  }
  // (only over values that all read well: a bad count already said what is wrong with it)
  if (x.clean())
    if (const std::string why = fabric::portShortage(p); !why.empty()) x.fail("device.fabric: " + why);
  x.raise();
  return p;
}

fabric::FabricParams loadFabricParams(const SimOptions& options) {
  config::Preset preset = loadPreset(options.preset);
  std::string origin = "preset " + options.preset;
  if (!options.overrides_file.empty()) {
    applyOverridesFile(preset, options.overrides_file);
    origin += " + " + options.overrides_file;
  }
  for (const auto& o : options.overrides) applyOverride(preset, o, "override \"" + o + "\"");
  if (!options.overrides.empty()) origin += " + overrides";
  if (!preset.device().has_fabric())
    throw ConfigError(origin + ": device.fabric: missing (the preset describes no collective fabric)");
  fabric::FabricParams p = toFabricParams(preset.device().fabric(), origin);
  if (const char* env = std::getenv("CARDSIM_NODES"); env && *env) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (*end != '\0' || n < 1 || n > kMaxNodes)
      throw ConfigError(std::string("CARDSIM_NODES: \"") + env + "\" is not a node count (1.." +
                        std::to_string(kMaxNodes) + ")");
    p.nodes = static_cast<uint32_t>(n);
    p.nodes_set = true;
  }
  if (p.nodes > 1 && p.nic.link.bandwidth_bytes_per_s <= 0)
    throw ConfigError(origin + ": device.fabric.nic: missing, but " + std::to_string(p.nodes) +
                      " nodes need NICs between them");
  return p;
}

}  // namespace cardsim::sim
