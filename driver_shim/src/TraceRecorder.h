// The writing side of a trace (cardsim/trace.h): turns host calls and completed device
// commands into records of traces/proto/trace.proto and hands them to a TraceWriter.
//
// Records are built on an arena that is reset every few hundred records and written into
// the writer's large buffer, so recording allocates nothing per record. Names (kernels,
// commands) are written once each as Name records and referred to by id.
//
// Each device command is tied to the host call that submitted it: the recorder remembers,
// per (device, stream), the recent calls that may submit commands, with their host time
// spans; a command was submitted at its ready time, which lies in exactly one of those
// spans (host clocks only move forward and every call costs some time), since a stream
// completes its commands in order.
//
// Not thread-safe: TraceBackend serializes every use under its lock.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <google/protobuf/arena.h>

#include "cardsim/shim.h"
#include "cardsim/trace.h"
#include "traces/lib/TraceWriter.h"
#include "traces/proto/trace.pb.h"

namespace cardsim::shim {

class TraceRecorder {
 public:
  // The host side of one call.
  struct Host {
    uint32_t thread = 0;
    uint64_t begin_ps = 0;
    uint64_t end_ps = 0;
    int status = 0;
    int device = 0;
  };

  // Creates the file (throws trace::TraceError naming it) and writes the header; an empty
  // `path`: no file. Every record also goes to `observer` if there is one.
  TraceRecorder(const std::string& path, trace::Header header, trace::Compression compression = {},
                TraceObserver* observer = nullptr);

  // A cleared record on the arena for the caller to fill; valid until the next call.
  trace::Envelope* newRecord();
  // Writes a record of a host call (host fields set here); returns its call number.
  uint64_t writeCall(trace::Envelope* e, const Host& host);
  // The call submitted device commands on (device, stream) during its host span.
  void noteSubmission(int device, uint32_t stream, uint64_t call, const Host& host);
  // Writes completed device commands, each tied to its call.
  void addCommands(const std::vector<ActivityRecord>& done);
  // Writes the commands still waiting for their call (none will come) and the End record.
  // `fabric_job`: the job key of the fabric server the process joined ("" if none).
  void finish(const std::string& reason, const std::string& fabric_job = "");

  uint32_t nameId(std::string_view text);
  // Ids for handles, stable while the handle lives (handles are reused after destroy).
  uint32_t eventId(const void* handle);
  void forgetEvent(const void* handle);
  uint32_t graphId(const void* handle);
  void forgetGraph(const void* handle);

  // Devices the trace has seen submissions on (to synchronize before finishing).
  const std::set<int>& devicesUsed() const { return devices_; }
  // The file recorded into ("" with an observer only).
  const std::string& path() const { return path_; }

 private:
  struct Span {
    uint64_t call, begin_ps, end_ps;
    uint64_t matched = 0;   // commands given this call so far
  };
  struct StreamKey {
    int device;
    uint32_t stream;
    bool operator<(const StreamKey& o) const {
      return device != o.device ? device < o.device : stream < o.stream;
    }
  };
  void write(const trace::Envelope& e);
  // The call that submitted `a`: 0 if none was recorded; false if it may not be recorded yet.
  bool match(const ActivityRecord& a, uint64_t* call);
  void writeCommand(const ActivityRecord& a, uint64_t call);

  std::string path_;
  std::unique_ptr<trace::TraceWriter> writer_;   // none: the observer only
  TraceObserver* observer_ = nullptr;
  std::unique_ptr<char[]> arena_block_;
  std::unique_ptr<google::protobuf::Arena> arena_;
  uint32_t arena_records_ = 0;
  uint64_t calls_ = 0;
  uint64_t commands_ = 0;

  std::deque<std::string> name_storage_;   // stable storage for the map's keys
  std::unordered_map<std::string_view, uint32_t> names_;
  std::unordered_map<const void*, uint32_t> events_, graphs_;
  uint32_t next_event_ = 1, next_graph_ = 1;

  std::map<StreamKey, std::deque<Span>> spans_;
  std::vector<ActivityRecord> held_;        // commands whose call may not be recorded yet
  std::set<int> devices_;
};

}  // namespace cardsim::shim
