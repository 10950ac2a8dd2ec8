// Reading Chakra's files: the length-delimited execution trace of a rank (PREFIX.<rank>.et:
// a GlobalMetadata, then the nodes) and ASTRA-sim's process groups (PREFIX.comm_groups.json).
// For ChakraImport; errors are trace::TraceError naming the file, message and offset.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "traces/export/proto/chakra_et.pb.h"

namespace cardsim::replay {

struct EtFile {
  ChakraProtoMsg::GlobalMetadata meta;
  std::vector<ChakraProtoMsg::Node> nodes;
};

// A rank's file; one of Chakra's layout before 0.0.4 (no GlobalMetadata) too.
EtFile readEt(const std::string& path);

// {"1": [0, 1], "2": [2, 3]}: the groups by name; none if the file is not there.
std::map<std::string, std::vector<int>> readGroups(const std::string& path);

// The members of process group `pg` ("": every rank of the job) for a collective of rank
// `rank` of `world`: a group the file `groups_source` lacks, a member outside the job, or a
// group without `rank` is a TraceError starting with `where` (the node).
std::vector<int> groupMembers(const std::map<std::string, std::vector<int>>& groups, const std::string& pg,
                              int rank, int world, const std::string& where, const std::string& groups_source);

// A node's numbers in range: sizes and work non-negative, a collective's size one the fabric
// model can time (`communicates`), cardsim's enums known, devices below `max_devices`; else a
// TraceError starting with `where` (the node).
void checkNodeNumbers(const ChakraProtoMsg::Node& n, const std::string& where, bool communicates, int max_devices);

}  // namespace cardsim::replay
