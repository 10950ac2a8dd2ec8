#include "traces/export/RunTimeline.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "traces/lib/CapturedByGraph.h"
#include "traces/lib/TraceFormat.h"
#include "traces/lib/TraceReader.h"

namespace cardsim::timeline {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const char* copyName(trace::CopyKind k) {
  switch (k) {
    case trace::COPY_HOST_TO_DEVICE: return "HtoD";
    case trace::COPY_DEVICE_TO_HOST: return "DtoH";
    case trace::COPY_DEVICE_TO_DEVICE: return "DtoD";
    case trace::COPY_HOST_TO_HOST: return "HtoH";
    case trace::COPY_DEFAULT: return "default";
    case trace::COPY_PEER: return "peer";
    default: return "?";
  }
}

// The host call's name as the program called it, with what identifies it at a glance.
std::string callName(const trace::Envelope& e, const std::map<uint32_t, std::string>& names) {
  switch (e.record_case()) {
    case trace::Envelope::kAlloc:
      switch (e.alloc().kind()) {
        case trace::MEMORY_HOST_PINNED: return "hostMalloc";
        case trace::MEMORY_HOST_REGISTERED: return "hostRegister";
        default: return "malloc";
      }
    case trace::Envelope::kFree:
      switch (e.free().kind()) {
        case trace::MEMORY_HOST_PINNED: return "hostFree";
        case trace::MEMORY_HOST_REGISTERED: return "hostUnregister";
        default: return "free";
      }
    case trace::Envelope::kMemcpy:
      return std::string(e.memcpy().async() ? "memcpyAsync " : "memcpy ") + copyName(e.memcpy().kind());
    case trace::Envelope::kMemset: return e.memset().async() ? "memsetAsync" : "memset";
    case trace::Envelope::kKernel: {
      auto n = names.find(e.kernel().name());
      return "launch " + (n != names.end() ? n->second : std::string("kernel"));
    }
    case trace::Envelope::kEvent: return "event " + lower(trace::EventOp::Op_Name(e.event().op()));
    case trace::Envelope::kStream: return "stream " + lower(trace::StreamOp::Op_Name(e.stream().op()));
    case trace::Envelope::kGraph: return "graph " + lower(trace::GraphOp::Op_Name(e.graph().op()));
    case trace::Envelope::kCollective:
      return e.collective().op().empty() ? "collective" : "collective " + e.collective().op();
    case trace::Envelope::kApi: return lower(trace::ApiCall::Api_Name(e.api().api()));
    default: return "call";   // a kind from a newer minor version
  }
}

// The group a collective belongs to: its key, or its ranks when it has none (as the shim
// and the fabric identify it).
std::string groupKey(const trace::Collective& c) {
  // Point to point: a key per direction and tag, so that a send and its receive are the same
  // transfer of it on both ranks (an exchange's two directions count apart, as they match).
  if (c.op() == "send_recv" && c.ranks_size() >= 2) {
    const int src = c.ranks(std::clamp(static_cast<int>(c.root()), 0, c.ranks_size() - 1));
    const int dst = c.ranks(std::clamp(static_cast<int>(c.peer()), 0, c.ranks_size() - 1));
    return "p2p " + std::to_string(src) + "->" + std::to_string(dst) + " tag " + std::to_string(c.tag());
  }
  if (!c.group().empty()) return c.group();
  std::string key;
  for (int m : c.ranks()) key += std::to_string(m) + ",";
  return key;
}

}  // namespace

RunTimeline::RunTimeline(const std::map<int, std::string>& rank_files) {
  for (const auto& [rank, file] : rank_files) readRank(rank, file);
  linkCollectives();
}

void RunTimeline::readRank(int rank, const std::string& file) {
  trace::TraceReader reader(file);
  const std::size_t r = ranks_.size();
  ranks_.push_back(Rank{rank, file, reader.header(), {}});
  const std::size_t first_call = calls_.size(), first_command = commands_.size();
  std::map<uint32_t, std::string>& names = ranks_.back().names;
  std::unordered_map<uint64_t, std::size_t> call_index;   // call number -> calls_
  while (const trace::Envelope* next = reader.next()) {
    const trace::Envelope& e = *next;   // the reader's: copied where it is kept
    switch (e.record_case()) {
      case trace::Envelope::kName: names[e.name().id()] = e.name().text(); break;
      case trace::Envelope::kCommand: {
        Command c;
        c.rank = r;
        c.command = e.command();
        auto n = names.find(c.command.name());
        c.name = n != names.end() ? n->second : lower(trace::DeviceCommand::Kind_Name(c.command.kind()));
        commands_.push_back(std::move(c));
        break;
      }
      default:
        if (e.call() == 0) break;   // not a host call (or a newer kind without host fields)
        call_index[e.call()] = calls_.size();
        calls_.push_back(HostCall{r, e, callName(e, names)});
    }
  }

  // Each command's call. A collective's ready time is when its stream reached it, not when
  // the host submitted it, so the call the recorder tied a COLLECTIVE command to can be a
  // later call on its stream (or none): collectives are paired with the successful
  // collective calls instead, in order per device and stream, as a stream runs them.
  std::map<std::pair<int, uint32_t>, std::deque<std::size_t>> collective_calls;
  for (std::size_t i = first_call; i < calls_.size(); ++i) {
    const trace::Envelope& c = calls_[i].record;
    if (c.record_case() == trace::Envelope::kCollective && c.status() == 0)
      collective_calls[{c.device(), c.collective().stream()}].push_back(i);
  }
  std::vector<std::size_t> collectives;
  for (std::size_t i = first_command; i < commands_.size(); ++i) {
    if (commands_[i].command.kind() == trace::DeviceCommand::COLLECTIVE) {
      collectives.push_back(i);
      continue;
    }
    auto it = commands_[i].command.call() ? call_index.find(commands_[i].command.call()) : call_index.end();
    if (it != call_index.end()) commands_[i].call = it->second;
  }
  std::stable_sort(collectives.begin(), collectives.end(), [&](std::size_t a, std::size_t b) {
    return commands_[a].command.start_ps() < commands_[b].command.start_ps();
  });
  for (std::size_t i : collectives) {
    const trace::DeviceCommand& d = commands_[i].command;
    std::deque<std::size_t>& q = collective_calls[{d.device(), d.stream()}];
    if (q.empty()) continue;
    commands_[i].call = q.front();
    q.pop_front();
    if (calls_[commands_[i].call].record.call() != d.call()) ++repaired_;
  }
  tieGraphCommands(first_call, first_command);
  std::unordered_map<std::size_t, std::vector<std::size_t>> commands_of_call;   // by kind below
  for (std::size_t i = first_command; i < commands_.size(); ++i) {
    if (commands_[i].call == kNone) {
      ++uncorrelated_;
      continue;
    }
    commands_of_call[commands_[i].call].push_back(i);
  }
  auto commandOf = [&](std::size_t call, trace::DeviceCommand::Kind kind) {
    auto it = commands_of_call.find(call);
    if (it == commands_of_call.end()) return kNone;
    for (std::size_t c : it->second)
      if (commands_[c].command.kind() == kind) return c;
    return kNone;
  };

  uint64_t first_ps = std::numeric_limits<uint64_t>::max();
  for (std::size_t i = first_call; i < calls_.size(); ++i) first_ps = std::min(first_ps, calls_[i].record.host_begin_ps());

  // Calls in the order they returned: an event's latest record before a wait is the one it
  // waits for; a group's collectives are numbered in this order on every member.
  std::unordered_map<uint32_t, std::size_t> last_record;   // event -> its EVENT_RECORD command
  std::unordered_set<uint32_t> runtime_events;               // created with kEventRuntimeMarker
  std::map<std::string, uint64_t> group_counts;
  struct Live {
    int device;
    uint64_t bytes;
  };
  std::map<std::pair<int, uint64_t>, Live> live;              // (kind, address)
  std::map<std::pair<int, int>, uint64_t> in_use;             // (device, kind) -> bytes
  auto sample = [&](int device, trace::MemoryKind kind, uint64_t ps, int64_t delta) {
    auto [it, fresh] = in_use.emplace(std::make_pair(device, static_cast<int>(kind)), 0);
    if (fresh) memory_.push_back(MemorySample{r, device, kind, first_ps, 0});   // the counter starts empty
    it->second = static_cast<uint64_t>(static_cast<int64_t>(it->second) + delta);
    memory_.push_back(MemorySample{r, device, kind, ps, it->second});
  };
  for (std::size_t i = first_call; i < calls_.size(); ++i) {
    const trace::Envelope& c = calls_[i].record;
    if (c.status() != 0) continue;   // a failed call did nothing
    switch (c.record_case()) {
      case trace::Envelope::kEvent: {
        const trace::EventOp& ev = c.event();
        if (ev.op() == trace::EventOp::CREATE) {
          if (ev.flags() & trace::kEventFlagRuntimeMarker) runtime_events.insert(ev.event());
          else runtime_events.erase(ev.event());
        }
        const bool runtime = runtime_events.count(ev.event()) > 0;
        // (A wait on one is the program's: a Work's wait() from another stream.)
        calls_[i].runtime_marker = runtime && ev.op() != trace::EventOp::WAIT;
        if (ev.op() == trace::EventOp::RECORD) {
          const std::size_t cmd = commandOf(i, trace::DeviceCommand::EVENT_RECORD);
          if (cmd != kNone) {
            commands_[cmd].event = ev.event();
            commands_[cmd].runtime_marker = runtime;
          }
          last_record[ev.event()] = cmd;
        } else if (ev.op() == trace::EventOp::WAIT) {
          const std::size_t cmd = commandOf(i, trace::DeviceCommand::EVENT_WAIT);
          if (cmd == kNone) break;
          commands_[cmd].event = ev.event();
          commands_[cmd].runtime_marker = runtime;
          auto rec = last_record.find(ev.event());
          if (rec != last_record.end() && rec->second != kNone)
            dependencies_.push_back(Dependency{DependencyKind::kEventWait, rec->second, cmd});
          else
            ++waits_without_record_;   // recorded before the trace began, or never
        }
        break;
      }
      case trace::Envelope::kCollective: {
        const std::string key = groupKey(c.collective());
        const uint64_t seq = group_counts[key]++;
        const std::size_t cmd = commandOf(i, trace::DeviceCommand::COLLECTIVE);
        if (cmd == kNone) break;
        commands_[cmd].group = key;
        commands_[cmd].group_seq = seq;
        Members& m = collectives_[{key, seq}];
        m.commands.push_back(cmd);
        m.expected = std::max<std::size_t>(m.expected, static_cast<std::size_t>(c.collective().ranks_size()));
        break;
      }
      case trace::Envelope::kAlloc: {
        const trace::Alloc& a = c.alloc();
        if (a.address() == 0) break;
        const int device = a.kind() == trace::MEMORY_DEVICE ? c.device() : -1;   // the thread's current card
        live[{a.kind(), a.address()}] = Live{device, a.bytes()};
        sample(device, a.kind(), c.host_end_ps(), static_cast<int64_t>(a.bytes()));
        break;
      }
      case trace::Envelope::kFree: {
        const trace::Free& f = c.free();
        if (f.address() == 0) break;
        auto it = live.find({f.kind(), f.address()});
        if (it == live.end()) {
          ++unmatched_frees_;   // allocated before the recording began
          break;
        }
        sample(it->second.device, f.kind(), c.host_end_ps(), -static_cast<int64_t>(it->second.bytes));
        live.erase(it);
        break;
      }
      default: break;
    }
  }
  linkGraphEvents(first_call, commands_of_call);
}

void RunTimeline::tieGraphCommands(std::size_t first_call, std::size_t first_command) {
  // A graph's commands on the streams it forked to inside are tied to no call (no host call
  // submits to those streams): its launch submitted them, within the launch's host span.
  std::vector<std::size_t> launches;   // in host order
  for (std::size_t i = first_call; i < calls_.size(); ++i) {
    const trace::Envelope& c = calls_[i].record;
    if (c.status() == 0 && c.record_case() == trace::Envelope::kGraph && c.graph().op() == trace::GraphOp::LAUNCH)
      launches.push_back(i);
  }
  if (launches.empty()) return;
  for (std::size_t i = first_command; i < commands_.size(); ++i) {
    Command& c = commands_[i];
    if (c.call != kNone || c.command.kind() == trace::DeviceCommand::COLLECTIVE) continue;
    const uint64_t ready = c.command.ready_ps();
    auto it = std::upper_bound(launches.begin(), launches.end(), ready, [&](uint64_t t, std::size_t l) {
      return t <= calls_[l].record.host_begin_ps();
    });
    if (it == launches.begin()) continue;
    const trace::Envelope& launch = calls_[*std::prev(it)].record;
    if (ready <= launch.host_end_ps()) c.call = *std::prev(it);
  }
}

void RunTimeline::linkGraphEvents(std::size_t first_call,
                                  const std::unordered_map<std::size_t, std::vector<std::size_t>>& commands_of_call) {
  // Per graph, the event records and waits its capture took (calls that ran nothing), in
  // capture order. Each launch runs them as commands in that order (its commands are ready
  // in capture order): the n-th record (wait) command is the n-th captured record (wait),
  // and a wait waits for the latest record of its event before it.
  struct Captured {
    bool record;
    uint32_t event;
  };
  trace::CapturedByGraph<Captured> captured;
  for (std::size_t i = first_call; i < calls_.size(); ++i) {
    const trace::Envelope& c = calls_[i].record;
    if (c.status() != 0) continue;
    if (c.record_case() == trace::Envelope::kGraph) {
      captured.graphOp(c.graph());
    } else if (c.record_case() == trace::Envelope::kEvent && !commands_of_call.count(i) &&
               (c.event().op() == trace::EventOp::RECORD || c.event().op() == trace::EventOp::WAIT)) {
      captured.add(c.event().stream(), Captured{c.event().op() == trace::EventOp::RECORD, c.event().event()});
    }
  }
  for (std::size_t i = first_call; i < calls_.size(); ++i) {
    const trace::Envelope& c = calls_[i].record;
    if (c.record_case() != trace::Envelope::kGraph || c.graph().op() != trace::GraphOp::LAUNCH) continue;
    const std::vector<Captured>* g = captured.graph(c.graph().graph());
    auto mine = commands_of_call.find(i);
    if (!g || mine == commands_of_call.end()) continue;
    std::vector<std::size_t> records, waits;
    std::vector<std::size_t> in_order = mine->second;
    std::stable_sort(in_order.begin(), in_order.end(), [&](std::size_t a, std::size_t b) {
      return commands_[a].command.ready_ps() < commands_[b].command.ready_ps();
    });
    for (std::size_t k : in_order) {
      if (commands_[k].command.kind() == trace::DeviceCommand::EVENT_RECORD) records.push_back(k);
      if (commands_[k].command.kind() == trace::DeviceCommand::EVENT_WAIT) waits.push_back(k);
    }
    std::size_t r = 0, w = 0;
    std::unordered_map<uint32_t, std::size_t> latest;   // event -> its latest record command
    for (const Captured& op : *g) {
      if (op.record && r < records.size()) {
        commands_[records[r]].event = op.event;
        latest[op.event] = records[r++];
      } else if (!op.record && w < waits.size()) {
        commands_[waits[w]].event = op.event;
        auto rec = latest.find(op.event);
        if (rec != latest.end()) dependencies_.push_back(Dependency{DependencyKind::kEventWait, rec->second, waits[w]});
        ++w;
      }
    }
  }
}

void RunTimeline::linkCollectives() {
  // After every rank's event waits: collectives by group and number, each from the member
  // of the first rank present (members are in rank order) to the others.
  for (const auto& [key, m] : collectives_) {
    if (m.commands.size() < m.expected) ++unpaired_collectives_;   // a member's rank file is not here
    for (std::size_t i = 1; i < m.commands.size(); ++i)
      dependencies_.push_back(Dependency{DependencyKind::kCollective, m.commands.front(), m.commands[i]});
  }
}

}  // namespace cardsim::timeline
