// What cardsim's own Chakra export says of a rank's host (ChakraWriter), read back for a
// replay of the files: the devices a host node synchronizes whole, the synchronizing calls
// it waited in, and the recorded run's settings a replay takes over. Checked: a bad value is
// a TraceError naming the node (`where`) and the attribute.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "traces/export/proto/chakra_et.pb.h"
#include "traces/proto/trace.pb.h"

namespace cardsim::replay {

// Devices a converted rank may name (as CARDSIM_DEVICES allows).
constexpr int kMaxDevices = 4096;

// One synchronizing call of a host node (cardsim_sync_calls: "ps@dD", "ps@I+J"), as recorded.
struct HostSyncCall {
  uint64_t duration_ps = 0;
  int device = -1;               // a device synchronize's device, else
  std::vector<uint64_t> nodes;   // the nodes it waited for (each one `deps` holds)
};

// One of the runtime's own event waits in a host node's time (cardsim_marker_waits:
// "ps@D:S>N"): recorded stream S of device D waited for node N (-1: for no node of the file),
// the call taking `duration_ps` of the node's time.
struct HostMarkerWait {
  uint64_t duration_ps = 0;
  int device = 0;
  int64_t stream = 0;
  int64_t node = -1;
};

// cardsim_synchronizes: the devices a host node synchronizes whole.
std::set<int> wholeDevices(const ChakraProtoMsg::Node& n, const std::string& where);
// cardsim_sync_calls, in order; `deps`: the node's dependencies.
std::vector<HostSyncCall> syncCalls(const ChakraProtoMsg::Node& n, const std::set<uint64_t>& deps,
                                    const std::string& where);
// cardsim_marker_waits, in order; their time is at most the node's (`duration_ps`), each
// node N one the node's file holds (`has_node`).
std::vector<HostMarkerWait> markerWaits(const ChakraProtoMsg::Node& n, double duration_ps,
                                        const std::function<bool(uint64_t)>& has_node, const std::string& where);
// The metadata's cardsim_env:KEY settings (trace::kReplayedEnvironment) into `h`'s environment.
void recordedEnvironment(const ChakraProtoMsg::GlobalMetadata& meta, trace::Header* h);

}  // namespace cardsim::replay
