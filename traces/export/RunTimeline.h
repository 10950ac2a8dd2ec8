// A recorded run (every rank file of a trace directory, or one rank file) read into one
// format-neutral structure for the exporters (cardsim export): the host calls with their
// virtual host times, the device commands with their names and the call that submitted
// each, the dependencies between commands (an event wait on the event's record, the members
// of one collective across ranks) and the memory in use over time. Each export format is a
// writer of its own over this structure (PerfettoWriter, ...), so that reading the trace
// and pairing records up is done once, the same way for every format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "traces/proto/trace.pb.h"

namespace cardsim::timeline {

class RunTimeline {
 public:
  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

  struct Rank {
    int rank = 0;
    std::string file;
    trace::Header header;
    std::map<uint32_t, std::string> names;   // the Name records: id -> text
  };

  // One host call: its record as written (payload and host fields).
  struct HostCall {
    std::size_t rank = 0;     // index into ranks()
    trace::Envelope record;
    std::string name;         // "launch aten::mm", "memcpyAsync HtoD", "event record", ...
    bool runtime_marker = false;   // a create, record or destroy of an event the runtime made
                                   // for itself (Command::runtime_marker), not the program's
  };

  struct Command {
    std::size_t rank = 0;     // index into ranks()
    trace::DeviceCommand command;
    std::string name;         // the Name record's text; the kind's name when it has none
    std::size_t call = kNone; // index into calls() of the call that submitted it (for a
                              // COLLECTIVE, the collective call paired with it by order)
    uint32_t event = 0;       // EVENT_RECORD / EVENT_WAIT: the event, when its call says so
    bool runtime_marker = false;   // ... of an event the runtime made for itself (created with
                                   // trace::kEventFlagRuntimeMarker: a receive's posting marker, a
                                   // Chakra import's ordering between streams), not the program
    std::string group;        // COLLECTIVE: the process group's key (or its ranks, "0,1,"); a send/recv:
                              // "p2p SRC->DST tag T", one per direction
    uint64_t group_seq = 0;   // COLLECTIVE: its number among the group's collectives, from 0
  };

  enum class DependencyKind { kEventWait, kCollective };

  // Between two commands: an event wait (from the EVENT_RECORD of the event to the
  // EVENT_WAIT) or two members of one collective on different ranks (from the member of
  // the group's first rank present to each other member).
  struct Dependency {
    DependencyKind kind;
    std::size_t from = 0, to = 0;   // indices into commands()
  };

  // Memory in use after a successful allocation or free, per rank and card (device >= 0)
  // or host memory of the rank (device -1), by kind. Counts only memory allocated while
  // recording: a free of memory allocated before is not in it (unmatchedFrees()).
  struct MemorySample {
    std::size_t rank = 0;
    int device = -1;
    trace::MemoryKind kind = trace::MEMORY_DEVICE;
    uint64_t ps = 0;          // host time the call returned
    uint64_t bytes = 0;       // in use after it
  };

  // Reads every file to its End record. Throws trace::TraceError naming a bad file.
  explicit RunTimeline(const std::map<int, std::string>& rank_files);

  const std::vector<Rank>& ranks() const { return ranks_; }
  const std::vector<HostCall>& calls() const { return calls_; }
  const std::vector<Command>& commands() const { return commands_; }
  const std::vector<Dependency>& dependencies() const { return dependencies_; }
  const std::vector<MemorySample>& memory() const { return memory_; }

  // What the trace could not pair up (for the exporter's notes).
  uint64_t unmatchedFrees() const { return unmatched_frees_; }
  uint64_t uncorrelatedCommands() const { return uncorrelated_; }
  // COLLECTIVE commands whose recorded call was another one (see readRank).
  uint64_t repairedCollectiveCalls() const { return repaired_; }
  uint64_t waitsWithoutRecord() const { return waits_without_record_; }
  // Collectives some of whose members' rank files are not in the export.
  uint64_t unpairedCollectives() const { return unpaired_collectives_; }

 private:
  void readRank(int rank, const std::string& file);
  void tieGraphCommands(std::size_t first_call, std::size_t first_command);
  void linkGraphEvents(std::size_t first_call,
                       const std::unordered_map<std::size_t, std::vector<std::size_t>>& commands_of_call);
  void linkCollectives();

  std::vector<Rank> ranks_;
  std::vector<HostCall> calls_;
  std::vector<Command> commands_;
  std::vector<Dependency> dependencies_;
  std::vector<MemorySample> memory_;
  struct Members {
    std::vector<std::size_t> commands;   // rank by rank
    std::size_t expected = 0;            // the group's size, as its calls say
  };
  std::map<std::pair<std::string, uint64_t>, Members> collectives_;   // (group, seq)
  uint64_t unmatched_frees_ = 0, uncorrelated_ = 0, waits_without_record_ = 0, unpaired_collectives_ = 0, repaired_ = 0;
};

}  // namespace cardsim::timeline
