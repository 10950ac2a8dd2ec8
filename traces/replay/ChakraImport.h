// Chakra execution traces (MLCommons; what ASTRA-sim reads, and what `cardsim export
// --chakra` writes) turned into cardsim traces that `cardsim replay` runs like recorded ones.
//
// PATH is a prefix with PREFIX.0.et ... PREFIX.<N-1>.et (and optionally
// PREFIX.comm_groups.json, ASTRA-sim's process groups: {"1": [0, 1], ...}) or one .et file.
// Each rank's nodes are issued in dependency order, as fast as the dependencies allow (the
// device's before the host's among those ready, by cardsim_call_ps where given):
//   - COMP_NODE with is_cpu_op: host time of its duration; the host first waits for the
//     device nodes it depends on (event synchronizes; a device synchronize per card
//     cardsim_synchronizes names);
//   - COMP_NODE with work (num_ops, tensor_size): a kernel the model times (class, dtype and
//     bytes from cardsim's own attributes when present: then the replay on the recording's
//     preset times it exactly as recorded); without work but with a duration: a step of that
//     duration; with neither: no command, only its dependencies (event records and waits);
//     cardsim's copies and memsets come back as copies and memsets;
//   - MEM_LOAD_NODE / MEM_STORE_NODE: host-to-device / device-to-host copies of tensor_size;
//   - COMM_COLL_NODE: the collective comm_type of comm_size bytes over the pg_name group
//     (every rank when the group is not named); COMM_SEND_NODE / COMM_RECV_NODE: a send_recv
//     from comm_src to comm_dst.
// Streams: cardsim's own (cardsim_device, cardsim_stream attributes), otherwise a node
// continues the stream of a dependency that was that stream's last node, else opens one.
// A dependency on another stream becomes an event recorded after it and waited on before.
#pragma once

#include <map>
#include <string>

namespace cardsim::replay {

// Whether `path` names Chakra files: a .et file, or a prefix with PREFIX.0.et.
bool isChakraPath(const std::string& path);

struct ChakraImport {
  std::map<int, std::string> files;   // rank -> the converted cardsim trace
  int world_size = 1;
  std::string preset;                 // from the files' metadata (cardsim's own); "" if none
};

// Converts every rank of `path` into `out_dir`/rank<N>.cstrace. Throws trace::TraceError
// naming the file, message and node that is wrong (does not parse, a dependency on a node
// that does not exist, a cycle, a group missing from the groups file).
ChakraImport importChakra(const std::string& path, const std::string& out_dir);

}  // namespace cardsim::replay
