// The fabric of one preset, in base units: the shape of one node and the links between
// nodes. Filled from the preset's `fabric` block (simulator/Config); buildTopology turns it
// into the graph the algorithms run on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device_models/fabric/Algorithms.h"
#include "device_models/fabric/Topology.h"

namespace cardsim::fabric {

enum class NodeShape : uint8_t {
  FullMesh,     // every pair of devices joined by its own link (BLink)
  SwitchStar,   // every device joined to one switch (NVSwitch)
  CardGroup,    // chips joined through their card's fabric ports; cards in a full mesh (MLU-Link)
};
const char* shapeName(NodeShape s);
NodeShape parseShape(const std::string& name);   // throws listing the valid names

struct FabricParams {
  NodeShape shape = NodeShape::SwitchStar;
  uint32_t devices_per_node = 8;
  LinkParams link;                    // mesh: each pair; star: device <-> switch; card group: card <-> card
  uint32_t link_lanes = 1;            // lanes (ports) `link` takes at each end; its bandwidth covers them all
  uint32_t ports = 0;                 // fabric ports per device (card, in a card group); 0: not checked
  uint32_t switch_ports = 0;          // star: the switch plane's ports; 0: not checked
  double port_bandwidth_bytes_per_s = 0;   // the most one lane carries; 0: no cap (applied to `link`)
  LinkParams on_card;                 // card group: chip <-> its card's ports
  uint32_t chips_per_card = 1;        // card group
  double switch_latency_s = 0;        // star: the switch; card group: the card's ports
  bool in_switch_reduction = false;   // star: the switch reduces (NVLS-style)
  double reduction_efficiency = 1;    // star: in-switch reduction traffic's share of the link rate
  double collective_latency_s = 0;    // fixed cost of one collective call, any algorithm
  uint32_t nodes = 1;                 // CARDSIM_NODES
  // fabric.nodes or CARDSIM_NODES was given: a job needing more nodes is refused, not grown
  // to fit (only the default of one node grows).
  bool nodes_set = false;
  NicParams nic;                      // between nodes
  double leaf_latency_s = 0;
  double oversubscription = 1;
  uint32_t channels = 1;              // rings/trees in parallel
  double chunk_bytes = 0;             // pipeline chunk; 0: none
  double switch_chunk_bytes = 0;      // in-switch reduction's chunk per channel and rank; 0: no pipeline
  uint32_t switch_channels = 1;       // in-switch reduction's channels
  // The preferred collective algorithm ("": the tuner's): each rank resolves it before a
  // collective reaches the fabric server, so it is no part of the signature.
  std::string algorithm;
  // The algorithms the vendor library has, which its tuner chooses among (empty: every one).
  std::vector<std::string> library_algorithms;
};

// A request on these parameters: their channels, chunk and library; op, bytes and ranks unset.
CollectiveRequest requestFor(const FabricParams& p);

// nodes x devices_per_node devices, node-major (device rank r is on node r / devices_per_node).
Topology buildTopology(const FabricParams& p);
// The nodes a job of `devices` devices runs on: the configured count, or as many as it needs.
uint32_t nodesFor(const FabricParams& p, uint64_t devices);
// The nodes a model of `devices` devices builds: those holding them, and a second where the
// job has more than one (its NICs and leaves then exist as in any multi-node job); nodes
// beyond hold no rank and carry nothing, so a thousand configured nodes cost nothing.
uint32_t nodesToBuild(const FabricParams& p, uint64_t devices);

// Every parameter but the node count (a job sizes that itself), as "key=value" pairs in a
// fixed order, exact to the bit: two sides of a fabric server compare them.
std::string fabricSignature(const FabricParams& p);
// The first key whose value differs between two signatures, "key: A vs B" ("" when equal).
std::string firstDifference(const std::string& a, const std::string& b);

}  // namespace cardsim::fabric
