// One rank's part of a replay report (ReplayReport.h), taken from its records as they come:
// read back from a trace file, or handed over by the recorder while the rank replays (a
// shim::TraceObserver), so that a replay need not write its trace and read it again.
//
// A rank's pass holds its report row and what the cross-rank parts need (the critical path
// follows collectives from rank to rank, the top kernels add up over ranks). A replay's
// rank process computes its pass and hands it to the parent in a compact binary form.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "traces/proto/trace.pb.h"
#include "traces/replay/ReplayReport.h"

namespace cardsim::replay {

struct Cmd {
  trace::DeviceCommand::Kind kind;
  int device;
  uint32_t stream;
  uint32_t name;                      // into RankData::names
  uint64_t ready, start, end, call;
  double bytes;
  bool memory_bound = false;
  uint32_t clusters = 0;              // kernels: the clusters it holds
};

// Plain data (a rank has one per host call: tens of thousands, moved as bytes).
struct Call {
  uint64_t begin = 0, end = 0;
  double alone_s = -1;                // collectives: the model's time alone
  uint32_t event = 0;                 // EventOp calls
  uint32_t group = 0;                 // collectives: the group key (or its ranks), in RankData::groups
  trace::EventOp::Op event_op = trace::EventOp::CREATE;
  bool is_event = false;
};

// Values by call number. Calls come numbered in increasing order (a flat vector then, no
// allocation per call); out of order, a later value for a number replaces the earlier one,
// as a map's would.
template <typename T>
class CallTable {
 public:
  void add(uint64_t call, T value) {
    sorted_ = sorted_ && (items_.empty() || items_.back().first < call);
    items_.emplace_back(call, std::move(value));
  }
  const T* find(uint64_t call) {
    settle();
    return findSettled(call);
  }
  const T* find(uint64_t call) const { return findSettled(call); }   // after settle()
  // Sorts by number, keeping the last value of each.
  void settle() {
    if (sorted_) return;
    std::stable_sort(items_.begin(), items_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::size_t out = 0;
    for (std::size_t i = 0; i < items_.size(); ++i) {
      if (i + 1 < items_.size() && items_[i + 1].first == items_[i].first) continue;
      items_[out++] = std::move(items_[i]);
    }
    items_.resize(out);
    sorted_ = true;
  }
  std::vector<std::pair<uint64_t, T>>& items() { return items_; }
  const std::vector<std::pair<uint64_t, T>>& items() const { return items_; }
  void reserve(std::size_t n) { items_.reserve(n); }

 private:
  const T* findSettled(uint64_t call) const {
    auto it = std::lower_bound(items_.begin(), items_.end(), call,
                               [](const auto& a, uint64_t n) { return a.first < n; });
    return it != items_.end() && it->first == call ? &it->second : nullptr;
  }
  std::vector<std::pair<uint64_t, T>> items_;
  bool sorted_ = true;
};

// A collective as the fabric model takes it (for the links' loads of a replicated replay).
struct CollectiveCall {
  std::string op, algorithm;
  double bytes = 0;
  std::vector<int> ranks;
  uint32_t root = 0, peer = 0;
};

struct RankData {
  int rank = 0;
  // What the rank's records say.
  std::vector<std::string> names{"?"};   // the commands' names ("?": none recorded)
  std::vector<std::string> groups{""};   // the collectives' group keys ("": none)
  std::vector<Cmd> cmds;
  std::vector<std::pair<uint64_t, uint64_t>> host_waits;   // (end, begin) of calls that wait for the device, sorted
  CallTable<Call> calls;                                   // the calls of the commands (settled)
  std::map<uint32_t, std::vector<uint64_t>> event_records; // event -> RECORD calls
  uint64_t first_host = std::numeric_limits<uint64_t>::max();
  const std::string& name(const Cmd& c) const { return names[c.name]; }
  // Indexes over them (buildIndex; `indexed` once built).
  bool indexed = false;
  CallTable<std::size_t> cmd_of_call;                          // the last command of a call
  std::map<std::pair<int, uint32_t>, std::vector<std::size_t>> streams;   // by start
  std::vector<std::size_t> stream_pos;                          // per command: its place in its stream
  std::vector<std::pair<uint64_t, std::size_t>> by_end;         // (end, cmd), sorted
  std::map<std::pair<std::string, uint64_t>, std::size_t> collectives;   // (group, n) -> cmd
  std::unordered_map<std::size_t, std::pair<std::string, uint64_t>> collective_key;
};

// Fills the indexes of `rd` from its commands and calls.
void buildIndex(RankData& rd);

struct RankPass {
  std::string preset, device_name;
  int world_size = 0;
  RankReport rr;
  RankData rd;                        // indexes not built
  std::vector<CollectiveCall> collectives;   // in call order, pre-timed ones left out
  uint64_t first = 0, last = 0;
};

// Takes one rank's records in file order (the header first) and sums them up.
class RankAnalyzer {
 public:
  RankAnalyzer(int rank, std::string file);
  ~RankAnalyzer();
  void header(const trace::Header& h);
  // Room for the records of about `trace_file`'s size (a hint: the tables then grow without
  // copying themselves over; room never used costs no memory the process touches).
  void reserveFor(const std::string& trace_file);
  void record(const trace::Envelope& e);
  // The rank's pass; the analyzer is spent.
  RankPass finish();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Runs fn(0) .. fn(n - 1) on up to one thread per core (ranks are independent until they
// are merged); rethrows the failure of the lowest index, as a serial pass would report it.
void inParallel(std::size_t n, const std::function<void(std::size_t)>& fn);

// Reads a rank's trace file through a RankAnalyzer. Throws trace::TraceError.
RankPass readRank(int rank, const std::string& path);

// The binary form a rank process hands its pass over in (native byte order: the same
// machine). readPass throws std::runtime_error naming `what` if the bytes are cut short.
std::string writePass(const RankPass& pass);
RankPass readPass(std::string_view bytes, const std::string& what);

// The report of a run from its ranks' passes (in rank order).
Report merge(std::vector<RankPass> passes, std::size_t top = 10);

}  // namespace cardsim::replay
