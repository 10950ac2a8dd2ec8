// Writes a recorded run as MLCommons Chakra execution traces, the workload format ASTRA-sim
// reads: PREFIX.<rank>.et per rank (length-delimited protobuf, a GlobalMetadata first,
// then the nodes; schema in traces/export/proto/chakra_et.proto) and
// PREFIX.comm_groups.json, the process groups as ASTRA-sim's --comm-group-configuration
// takes them ({"1": [0, 1], ...}; a collective's pg_name is its group's key there).
//
// Nodes, one per device command, numbered from 0 per rank in completion order:
//   - kernels, copies and memsets: COMP_NODE, duration_micros the recorded device time,
//     num_ops the kernel's flops, tensor_size its bytes (a copy's or memset's bytes);
//   - collectives: COMM_COLL_NODE with comm_type, comm_size (nccl-tests' size, as the
//     collective call gave it) and pg_name; send and recv: COMM_SEND_NODE / COMM_RECV_NODE
//     with comm_src, comm_dst and comm_tag (the pair's number, the same on both ranks);
//   - event records and waits: COMP_NODEs of no duration and no work (ASTRA-sim passes
//     them straight to their dependents), so that the graph keeps the program's structure.
//   - the host's time between its calls: CPU nodes (is_cpu_op true, "host"), one chain per
//     rank (HostChain.h); each device node depends on the one before its call, and the one
//     after a host synchronization on what that synchronization waited for.
// Device nodes have is_cpu_op false. data_deps: the previous command on the same stream, an
// event wait's record, the host node before the command's call. Chakra keeps whole
// microseconds; the exact recorded picoseconds ride along as cardsim_start_ps and
// cardsim_duration_ps, where a command's call began as cardsim_call_ps, so that a replay of
// the files on the recording's preset takes the recorded time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "traces/export/RunTimeline.h"

namespace cardsim::timeline {

class ChakraWriter {
 public:
  struct Summary {
    std::vector<std::string> files;   // the .et files, then the groups file
    uint64_t nodes = 0;
    uint64_t compute_nodes = 0;       // kernels, copies, memsets
    uint64_t marker_nodes = 0;        // event records and waits
    uint64_t host_nodes = 0;          // the host's time between calls (CPU nodes)
    uint64_t collective_nodes = 0;
    uint64_t point_to_point_nodes = 0;
    uint64_t dependencies = 0;
    uint64_t groups = 0;
    uint64_t pretimed_steps = 0;      // collectives of an op Chakra has no type for: COMP_NODEs
  };

  explicit ChakraWriter(const RunTimeline& run) : run_(run) {}

  // Writes every file through a temporary renamed into place; throws std::runtime_error
  // naming the file that could not be written (files already written stay).
  Summary write(const std::string& prefix) const;

 private:
  // Rank `r`'s commands of graph launches that are kernels, each with the kernel call its
  // graph captured (whose cost the launch ran): the launch's n-th kernel of a name is the
  // capture's n-th of that name, the capture's kernels being the calls between its begin
  // and end that ran nothing; copies and memsets likewise, by their bytes.
  std::map<std::size_t, std::size_t> capturedKernelCalls(std::size_t r) const;

  const RunTimeline& run_;
};

}  // namespace cardsim::timeline
