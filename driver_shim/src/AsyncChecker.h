// The async-correctness checker (shim.h, CARDSIM_CHECK=async): happens-before between the
// host and every stream, from the calls that order them (event record/wait, stream and
// event synchronize or a successful query, device synchronize), and a shadow of device and
// pinned-host memory holding the last unordered accesses of each byte range. An access that
// is not ordered after a conflicting earlier one (a write against anything, anything against
// a write) is reported, naming both sides by their sites (the framework layer's handles for
// Python stacks).
//
// Ordering is vector clocks, one entry per stream: each command queued on a stream advances
// its epoch; a command starts after everything the host knew complete when it was queued
// (the submission joins the host's clock); an event carries its stream's clock; a wait joins.
// Accesses by the same stream are ordered by the stream. Memory freed by the framework's
// allocator keeps its accesses, marked freed, so that a block handed out again while another
// stream may still use it (a missing record_stream) shows as such. Accesses made while a
// stream captures belong to the graph and are replayed as accesses of the replaying stream.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "cardsim/shim.h"

namespace cardsim::shim {

// A stream: its handle, or (a device's default stream, the null handle) its device + 1.
using StreamKey = uint64_t;

// This thread's site (checkSetSite), for accesses the runtime notes itself (copies, memsets).
uint64_t checkCurrentSite();

class VectorClock {
 public:
  uint64_t get(StreamKey k) const;
  void set(StreamKey k, uint64_t epoch);
  void join(const VectorClock& other);

 private:
  std::vector<std::pair<StreamKey, uint64_t>> entries_;
};

class AsyncChecker {
 public:
  struct StreamRef {
    StreamKey key = 0;
    uint32_t id = 0;   // streamGetId, for reports
    int device = 0;
  };
  static StreamKey keyOf(Stream s, int device) {
    return s ? static_cast<StreamKey>(reinterpret_cast<uintptr_t>(s)) : static_cast<StreamKey>(device) + 1;
  }

  // What the runtime did (called after the call succeeded).
  void copyQueued(const StreamRef& s, void* dst, const void* src, std::size_t bytes, MemcpyKind kind,
                  bool async);
  void memsetQueued(const StreamRef& s, void* ptr, std::size_t bytes, bool async);
  void eventRecorded(Event e, const StreamRef& s);
  void streamWaited(const StreamRef& s, Event e);
  void hostWaitedEvent(Event e);
  void hostWaitedStream(const StreamRef& s);
  void hostWaitedDevice(int device);
  void eventDestroyed(Event e);
  void captureBegun(const StreamRef& s);
  void captureEnded(const StreamRef& s, Graph g);
  void graphLaunched(Graph g, const StreamRef& s);
  void graphDestroyed(Graph g);

  // What the framework layer reports: an operator's operands on `s`, a host operation on
  // host memory, a block its allocator took back.
  void deviceAccess(const StreamRef& s, uintptr_t lo, std::size_t bytes, bool write, uint64_t site);
  void hostAccess(uintptr_t lo, std::size_t bytes, bool write, uint64_t site);
  void blockFreed(uintptr_t lo, std::size_t bytes);

  std::vector<CheckReport> drain();
  std::size_t pendingReports() const;
  void reset();

 private:
  struct Access {
    StreamKey stream = 0;   // 0: the host
    uint64_t epoch = 0;
    uint64_t site = 0;
    uint32_t stream_id = 0;
    int device = -1;
    uint64_t graph = 0;     // replayed from this graph (0: none)
    bool write = false;
    bool freed = false;     // made to a block the allocator has since taken back
  };
  struct Segment {
    uintptr_t end = 0;
    std::optional<Access> write;
    std::vector<Access> reads;
  };
  using Shadow = std::map<uintptr_t, Segment>;
  struct StreamState {
    uint64_t epoch = 0;
    int device = 0;
    VectorClock clock;
    uint64_t capture = 0;   // the capture it belongs to (0: none)
  };
  struct EventState {
    VectorClock clock;
    uint64_t capture = 0;   // recorded inside this capture
  };
  struct CapturedAccess {
    uintptr_t lo;
    std::size_t bytes;
    bool write;
    uint64_t site;
  };

  StreamState& stream(const StreamRef& s);
  Access submit(const StreamRef& s, bool write, uint64_t site);   // queues one command
  void access(Shadow& m, uintptr_t lo, uintptr_t hi, const Access& a, const VectorClock& clock,
              int memory_device);
  void sweep();

  mutable std::mutex mutex_;
  VectorClock host_;
  std::unordered_map<StreamKey, StreamState> streams_;
  std::unordered_map<Event, EventState> events_;
  std::unordered_map<uint64_t, std::vector<CapturedAccess>> captures_;
  std::unordered_map<Graph, std::pair<uint64_t, std::vector<CapturedAccess>>> graphs_;
  uint64_t next_capture_ = 1, next_graph_ = 1;
  Shadow device_, host_memory_;
  std::size_t since_sweep_ = 0;
  std::vector<CheckReport> reports_;
};

}  // namespace cardsim::shim
