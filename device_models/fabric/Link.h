// A fabric link: one direction between two nodes of the topology (a device, a switch, a
// NIC), with its bandwidth (all its lanes; FabricParams.link_lanes counts them where the
// ports matter) and the latency of one traversal. Flows share it max-min fairly
// (MaxMinFair); FabricLinks times peer copies over it in simulated time.
#pragma once

#include <cstdint>
#include <string>

namespace cardsim::fabric {

enum class NodeId : uint32_t {};
enum class LinkId : uint32_t {};
inline uint32_t index(NodeId n) { return static_cast<uint32_t>(n); }
inline uint32_t index(LinkId l) { return static_cast<uint32_t>(l); }

struct LinkParams {
  double bandwidth_bytes_per_s = 0;   // one direction, what collectives reach over it
  double latency_s = 0;               // wire and port latency of one traversal
  // What a peer copy's DMA reaches over it (copy engines move whole packets without a
  // collective library's protocol on top); 0: bandwidth_bytes_per_s.
  double copy_bandwidth_bytes_per_s = 0;
  double copyBandwidth() const { return copy_bandwidth_bytes_per_s > 0 ? copy_bandwidth_bytes_per_s : bandwidth_bytes_per_s; }
};

struct Link {
  NodeId from{}, to{};
  LinkParams params;
  std::string name;                   // "dev0->sw0"
};

}  // namespace cardsim::fabric
