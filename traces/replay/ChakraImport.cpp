#include "traces/replay/ChakraImport.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <regex>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "simulator/FabricModel.h"
#include "traces/export/proto/chakra_et.pb.h"
#include "traces/lib/TraceError.h"
#include "traces/lib/TraceFormat.h"
#include "traces/lib/TraceWriter.h"
#include "traces/replay/ChakraAttributes.h"
#include "traces/replay/ChakraFiles.h"
#include "traces/replay/ChakraHostNode.h"
#include "traces/replay/ReplayReport.h"

namespace cardsim::replay {

namespace {

namespace chakra = ChakraProtoMsg;
using chakra_attr::attr;
using chakra_attr::byteList;
using chakra_attr::number;
using chakra_attr::durationPs;
using chakra_attr::peersLatePs;
using chakra_attr::pointToPointEnds;
using chakra_attr::numberOr;
using chakra_attr::text;
using trace::TraceError;

bool isFile(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The address of the stand-in buffer of `side` (1 copy sources, 2 copy destinations, 3
// memsets) on `device`: one per pair, apart from every other.
uint64_t standIn(int side, int device) {
  return (static_cast<uint64_t>(side) << 56) + (static_cast<uint64_t>(device) << 40);
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

const char* collectiveOp(int64_t type) {
  switch (type) {
    case chakra::ALL_REDUCE: return "all_reduce";
    case chakra::REDUCE: return "reduce";
    case chakra::ALL_GATHER: return "all_gather";
    case chakra::BROADCAST: return "broadcast";
    case chakra::ALL_TO_ALL: return "all_to_all";
    case chakra::REDUCE_SCATTER:
    case chakra::REDUCE_SCATTER_BLOCK: return "reduce_scatter";
    case chakra::BARRIER: return "barrier";
    default: return nullptr;   // GATHER, SCATTER: no such collective on the fabric
  }
}

// A node's data and control dependencies together, each once.
std::set<uint64_t> depsOf(const chakra::Node& n) {
  std::set<uint64_t> deps(n.data_deps().begin(), n.data_deps().end());
  deps.insert(n.ctrl_deps().begin(), n.ctrl_deps().end());
  return deps;
}

// One rank's graph as a cardsim trace.
class RankConverter {
 public:
  RankConverter(const std::string& source, EtFile et, int rank, int world,
                const std::map<std::string, std::vector<int>>& groups)
      : source_(source), et_(std::move(et)), rank_(rank), world_(world), groups_(groups) {}

  void write(const std::string& out, const std::string& preset);

 private:
  enum class Op { kNone, kKernel, kStep, kCopy, kMemset, kCollective, kSendRecv, kHost };
  struct Plan {
    Op op = Op::kNone;
    int device = 0;
    uint32_t stream = 0;     // cardsim stream id in the converted trace (0: the device's default)
    bool record_after = false;
    uint32_t event = 0;      // the replay's own event after it (an ordering between streams)
    // cardsim's own export: an event record of the program (its marker node), recorded again
    // at its place for the program's event waits (so an export of the replay has them too).
    uint32_t program_event = 0;
    bool program_wait = false;   // an event wait of the program: waits on its record node's event
    bool blocking = false;       // a copy or memset its call waited for (the host is past it)
    std::set<int> synchronizes;  // a host node's devices it synchronizes whole (cardsim_synchronizes)
    std::vector<HostSyncCall> sync_calls;   // a host node's synchronizing calls (ChakraHostNode.h)
    std::vector<HostMarkerWait> marker_waits;   // ... and the runtime's own waits in its time
    double recorded_event = -1;  // cardsim_event: the program's event of a record or wait (-1: not said)
    uint32_t posting_marker = 0;   // a receive's posting marker, recorded before this node on its stream
    uint32_t posted_event = 0;     // a receive's: where it was posted (cardsim_posted_before)
    // Whether this program wait waits on record node q's event (the one of the same program
    // event; any record it depends on when the export did not say).
    bool waitsOn(const Plan& q) const {
      return program_wait && q.program_event != 0 && (recorded_event < 0 || q.recorded_event == recorded_event);
    }
  };

  std::string where(const chakra::Node& n) const {
    return source_ + ": node " + std::to_string(n.id()) + " ('" + n.name() + "')";
  }
  std::vector<std::size_t> topologicalOrder();
  Op opOf(const chakra::Node& n) const;
  trace::Envelope call(int device);
  uint32_t nameId(const std::string& text, trace::TraceWriter& w);

  std::string source_;
  EtFile et_;
  int rank_, world_;
  const std::map<std::string, std::vector<int>>& groups_;
  std::map<uint64_t, std::size_t> index_;   // node id -> et_.nodes
  std::vector<Op> ops_;                     // each node's, as opOf() says (topologicalOrder)
  uint64_t calls_ = 0;
  uint64_t host_ps_ = 0;   // the host's time where the next call is made (CPU nodes advance it)
  std::map<std::string, uint32_t> names_;
};

std::vector<std::size_t> RankConverter::topologicalOrder() {
  for (std::size_t i = 0; i < et_.nodes.size(); ++i) {
    if (!index_.emplace(et_.nodes[i].id(), i).second)
      throw TraceError(where(et_.nodes[i]) + ": a second node with this id");
    ops_.push_back(opOf(et_.nodes[i]));
  }
  std::vector<std::size_t> missing(et_.nodes.size(), 0);
  std::vector<std::vector<std::size_t>> dependents(et_.nodes.size());
  for (std::size_t i = 0; i < et_.nodes.size(); ++i) {
    for (uint64_t d : depsOf(et_.nodes[i])) {
      auto it = index_.find(d);
      if (it == index_.end())
        throw TraceError(where(et_.nodes[i]) + ": depends on node " + std::to_string(d) + ", which is not in the file");
      ++missing[i];
      dependents[it->second].push_back(i);
    }
  }
  // Ready nodes in file order: a writer's own order where the graph leaves a choice; the
  // device's before the host's (a host node moves the host on: what its calls issue goes
  // first, at the host time it was issued at).
  // cardsim's own files say where each call began on the host: in that order.
  std::set<std::tuple<bool, double, std::size_t>> ready;
  auto key = [&](std::size_t i) {
    return std::make_tuple(ops_[i] == Op::kHost, numberOr(et_.nodes[i], "cardsim_call_ps", 0), i);
  };
  for (std::size_t i = 0; i < missing.size(); ++i)
    if (!missing[i]) ready.insert(key(i));
  std::vector<std::size_t> order;
  while (!ready.empty()) {
    const std::size_t i = std::get<2>(*ready.begin());
    ready.erase(ready.begin());
    order.push_back(i);
    for (std::size_t j : dependents[i])
      if (--missing[j] == 0) ready.insert(key(j));
  }
  if (order.size() != et_.nodes.size()) {
    for (std::size_t i = 0; i < missing.size(); ++i)
      if (missing[i]) throw TraceError(where(et_.nodes[i]) + ": its dependencies form a cycle");
  }
  return order;
}

RankConverter::Op RankConverter::opOf(const chakra::Node& n) const {
  const std::string kind = text(n, "cardsim_kind");
  switch (n.type()) {
    case chakra::COMM_COLL_NODE: return Op::kCollective;
    case chakra::COMM_SEND_NODE:
    case chakra::COMM_RECV_NODE: return Op::kSendRecv;
    case chakra::MEM_LOAD_NODE:
    case chakra::MEM_STORE_NODE: return Op::kCopy;
    case chakra::COMP_NODE: {
      if (numberOr(n, "is_cpu_op", 0) != 0) return Op::kHost;   // the host's time, not the device's
      if (kind.rfind("MEMCPY", 0) == 0) return Op::kCopy;
      if (kind == "MEMSET") return Op::kMemset;
      if (kind == "COLLECTIVE") return Op::kStep;   // a step its caller timed
      if (numberOr(n, "num_ops", 0) > 0 || numberOr(n, "tensor_size", 0) > 0) return Op::kKernel;
      if (n.duration_micros() > 0 || numberOr(n, "cardsim_duration_ps", 0) > 0) return Op::kStep;
      return Op::kNone;   // a marker: only its dependencies matter
    }
    case chakra::INVALID_NODE:
    case chakra::METADATA_NODE: return Op::kNone;   // only their dependencies matter
    default:
      // A type Chakra does not define (a newer schema's, or a corrupt file): not guessed at.
      throw TraceError(where(n) + ": node type " + std::to_string(static_cast<int>(n.type())) +
                       " is not one of Chakra's (0-7: INVALID, METADATA, MEM_LOAD, MEM_STORE, COMP, COMM_SEND, "
                       "COMM_RECV, COMM_COLL)");
  }
}

trace::Envelope RankConverter::call(int device) {
  trace::Envelope e;
  e.set_call(++calls_);
  e.set_device(device);
  // Calls between CPU nodes share one host time: the replay issues each as soon as it can,
  // and after a CPU node that much later (its gap from the call before).
  e.set_host_begin_ps(host_ps_);
  e.set_host_end_ps(host_ps_);
  return e;
}

uint32_t RankConverter::nameId(const std::string& t, trace::TraceWriter& w) {
  auto [it, fresh] = names_.emplace(t, static_cast<uint32_t>(names_.size()) + 1);
  if (fresh) {
    trace::Envelope e;
    e.mutable_name()->set_id(it->second);
    e.mutable_name()->set_text(t);
    w.write(e);
  }
  return it->second;
}

void RankConverter::write(const std::string& out, const std::string& preset) {
  const std::vector<std::size_t> order = topologicalOrder();

  // Streams and events. Stream ids: 0 is a device's default stream; others numbered here.
  std::vector<Plan> plan(et_.nodes.size());
  std::map<std::pair<int, int64_t>, uint32_t> cardsim_streams;   // (device, recorded stream) -> id
  std::map<std::pair<int, uint32_t>, std::size_t> tail;          // (device, stream) -> its last node
  std::set<std::size_t> planned;                                  // device nodes planned so far
  uint32_t next_stream = 1, next_event = 1;
  int devices = 1;
  std::set<int> used;   // devices the nodes run on
  for (std::size_t i : order) {
    const chakra::Node& n = et_.nodes[i];
    Plan& p = plan[i];
    p.op = ops_[i];
    // Durations the model can run (simulated time ends at 2^63 ps).
    if (p.op == Op::kStep || p.op == Op::kHost) {
      const double ps = durationPs(n);
      if (!(ps >= 0 && ps < 1e18))
        throw TraceError(where(n) + (p.op == Op::kHost ? ": a host node of " : ": a node of ") +
                         std::to_string(ps * 1e-6) + " us is " +
                         (p.op == Op::kHost ? "not a host time" : "not a duration (a node may take up to 10^18 ps, 11.6 days)"));
    }
    if (p.op == Op::kHost) {
      // What the host waits for before going on: an event after it to synchronize on (a
      // blocking copy's call waited already; a device synchronized whole needs none).
      p.synchronizes = wholeDevices(n, where(n));
      p.sync_calls = syncCalls(n, depsOf(n), where(n));
      p.marker_waits = markerWaits(n, durationPs(n), [&](uint64_t id) { return index_.count(id) > 0; }, where(n));
      for (const HostMarkerWait& m : p.marker_waits) {   // its wait is made again where it was
        if (m.node < 0) continue;
        const std::size_t j = index_.at(static_cast<uint64_t>(m.node));
        Plan& q = plan[j];   // (its plan may come later: its op is known already)
        if (ops_[j] != Op::kHost && ops_[j] != Op::kNone && !q.record_after) {
          q.record_after = true;
          q.event = next_event++;
        }
      }
      for (uint64_t d : depsOf(n)) {
        Plan& q = plan[index_.at(d)];
        if (q.op != Op::kHost && !q.blocking && !p.synchronizes.count(q.device) && !q.record_after) {
          q.record_after = true;
          q.event = next_event++;
        }
      }
      continue;
    }
    p.blocking = (p.op == Op::kCopy || p.op == Op::kMemset) && numberOr(n, "cardsim_blocking", 0) != 0;
    double device = 0, stream = 0;
    if (number(n, "cardsim_device", &device) && number(n, "cardsim_stream", &stream)) {
      if (!(device >= 0 && device < kMaxDevices) || !(stream >= 0 && stream < 4294967296.0))
        throw TraceError(where(n) + ": cardsim_device " + std::to_string(device) + " / cardsim_stream " +
                         std::to_string(stream) + " name no device and stream (devices 0.." +
                         std::to_string(kMaxDevices - 1) + ")");
      p.device = static_cast<int>(device);
      const int64_t s = static_cast<int64_t>(stream);
      if (s == 0) {
        p.stream = 0;
      } else {
        auto [it, fresh] = cardsim_streams.emplace(std::make_pair(p.device, s), next_stream);
        if (fresh) ++next_stream;
        p.stream = it->second;
      }
    } else {
      // Continue a dependency's stream if it ended there, else open a stream.
      bool placed = false;
      for (uint64_t d : n.data_deps()) {
        const std::size_t j = index_.at(d);
        auto t = tail.find({plan[j].device, plan[j].stream});
        if (t != tail.end() && t->second == j) {
          p.stream = plan[j].stream;
          placed = true;
          break;
        }
      }
      if (!placed) p.stream = tail.empty() ? 0 : next_stream++;
    }
    checkNodeNumbers(n, where(n), p.op == Op::kCollective || p.op == Op::kSendRecv, kMaxDevices);
    devices = std::max(devices, p.device + 1);
    used.insert(p.device);
    double before = 0;   // a receive posted where its batch began: before that node, on its stream
    if (p.op == Op::kSendRecv && n.type() == chakra::COMM_RECV_NODE && number(n, "cardsim_posted_before", &before)) {
      auto b = before >= 0 ? index_.find(static_cast<uint64_t>(before)) : index_.end();
      if (b == index_.end() || !planned.count(b->second) || plan[b->second].op == Op::kHost ||
          plan[b->second].device != p.device || plan[b->second].stream != p.stream)
        throw TraceError(where(n) + ": cardsim_posted_before " + std::to_string(static_cast<long long>(before)) +
                         " names no node before the receive on its stream");
      Plan& q = plan[b->second];
      if (q.posting_marker == 0) q.posting_marker = next_event++;
      p.posted_event = q.posting_marker;
    }
    const std::string kind = text(n, "cardsim_kind");
    if (kind == "EVENT_RECORD") p.program_event = next_event++;
    p.program_wait = kind == "EVENT_WAIT";
    if (!number(n, "cardsim_event", &p.recorded_event)) p.recorded_event = -1;
    // A dependency on another stream: an event after it (the program's own, or one of the replay's).
    for (uint64_t d : depsOf(n)) {
      Plan& q = plan[index_.at(d)];
      if (q.op == Op::kHost || p.waitsOn(q)) continue;   // after the host's time: issued after it
      if ((q.stream != p.stream || q.device != p.device) && !q.record_after) {
        q.record_after = true;
        q.event = next_event++;
      }
    }
    tail[{p.device, p.stream}] = i;
    planned.insert(i);
  }

  trace::Header h;
  h.set_cardsim_version(et_.meta.version().empty() ? "chakra" : "chakra " + et_.meta.version());
  h.set_preset(preset);
  h.set_devices(static_cast<uint32_t>(devices));
  h.set_rank(rank_);
  h.set_world_size(world_);
  h.set_local_rank(-1);
  h.set_execution_mode("timing");
  h.set_backend("sim");
  h.set_started_by("chakra:" + source_);
  // cardsim's own export: the recorded run's settings a replay takes from its recording
  // (ChakraWriter), as a recording's header holds them.
  recordedEnvironment(et_.meta, &h);
  trace::TraceWriter w(out, h);

  std::set<std::pair<int, uint32_t>> created;
  std::set<uint64_t> waited;   // nodes the host has synchronized with
  std::set<uint64_t> written;   // device nodes issued so far
  // (device, stream, node): the stream waits for the node already (a runtime wait made again)
  std::set<std::tuple<int, uint32_t, uint64_t>> stream_waits;
  auto createStream = [&](int device, uint32_t stream) {
    if (stream == 0 || !created.insert({device, stream}).second) return;
    trace::Envelope e = call(device);
    e.mutable_stream()->set_op(trace::StreamOp::CREATE);
    e.mutable_stream()->set_stream(stream);
    w.write(e);
  };
  for (std::size_t i : order) {
    const chakra::Node& n = et_.nodes[i];
    const Plan& p = plan[i];
    if (p.op == Op::kHost) {
      // The host waits for the device work it depends on (cardsim's own: devices it
      // synchronized whole, as it did), then spends the node's time. A cardsim export lists
      // its synchronizing calls, each with its recorded time: they are made again in that
      // order, each spanning its time (so that one whose work is done by then returns where
      // the recorded one did, and a what-if's shorter wait shortens the host's); a call with
      // nothing left to wait for here is host time.
      std::set<int> device_synced;
      auto deviceSync = [&](int d, uint64_t ps) {
        trace::Envelope e = call(d);
        e.mutable_api()->set_api(trace::ApiCall::DEVICE_SYNCHRONIZE);
        e.set_host_end_ps(host_ps_ += ps);
        w.write(e);
        device_synced.insert(d);
      };
      auto eventSync = [&](uint64_t d, uint64_t ps) {
        const Plan& q = plan[index_.at(d)];
        if (q.op == Op::kHost || q.blocking || p.synchronizes.count(q.device) || !waited.insert(d).second) {
          host_ps_ += ps;
          return;
        }
        trace::Envelope e = call(q.device);
        e.mutable_event()->set_op(trace::EventOp::SYNCHRONIZE);
        e.mutable_event()->set_event(q.event);
        e.set_host_end_ps(host_ps_ += ps);
        w.write(e);
      };
      for (const HostSyncCall& c : p.sync_calls) {
        if (c.device >= 0 && p.synchronizes.count(c.device)) {
          deviceSync(c.device, c.duration_ps);
          continue;
        }
        uint64_t ps = c.duration_ps;   // the call's time goes to the first it makes
        for (uint64_t d : c.nodes) eventSync(d, std::exchange(ps, 0));
        host_ps_ += ps;
      }
      for (int d : p.synchronizes)
        if (!device_synced.count(d)) deviceSync(d, 0);
      for (uint64_t d : depsOf(n)) eventSync(d, 0);
      const double ps = durationPs(n);   // checked in the plan loop
      if (calls_ == 0 && ps > 0) {
        // The host's time before its first call reaching the device is the run's too (a
        // replay's run starts at its first call): a call of no cost marks where it began.
        trace::Envelope e = call(0);
        e.mutable_api()->set_api(trace::ApiCall::SET_DEVICE);
        e.mutable_api()->set_arg(0);
        w.write(e);
      }
      // The runtime's own waits in the node's time (cardsim_marker_waits) are made again
      // first, each where its node's event is there to wait for: the replay charges the call
      // its cost, in place of the recorded one's. (Elsewhere the node after it on its stream
      // gets its wait, as any node depending across streams, and the time stays host time.)
      uint64_t rest = static_cast<uint64_t>(ps);
      for (const HostMarkerWait& m : p.marker_waits) {
        if (m.node < 0 || !written.count(static_cast<uint64_t>(m.node))) continue;
        const Plan& q = plan[index_.at(static_cast<uint64_t>(m.node))];
        auto st = m.stream == 0 ? std::optional<uint32_t>(0) : std::optional<uint32_t>();
        if (auto it = cardsim_streams.find({m.device, m.stream}); it != cardsim_streams.end()) st = it->second;
        if (!q.record_after || !st) continue;
        createStream(m.device, *st);
        trace::Envelope e = call(m.device);
        e.mutable_event()->set_op(trace::EventOp::WAIT);
        e.mutable_event()->set_event(q.event);
        e.mutable_event()->set_stream(*st);
        w.write(e);
        stream_waits.insert({m.device, *st, static_cast<uint64_t>(m.node)});
        rest -= std::min(rest, m.duration_ps);
      }
      host_ps_ += rest;
      continue;
    }
    createStream(p.device, p.stream);
    for (uint64_t d : depsOf(n)) {
      const Plan& q = plan[index_.at(d)];
      if (q.op == Op::kHost) continue;   // issued after the host's time: the call's order has it
      const bool program = p.waitsOn(q);
      if (!program && q.stream == p.stream && q.device == p.device) continue;   // stream order has it
      if (!program && stream_waits.count({p.device, p.stream, d})) continue;   // waited already
      trace::Envelope e = call(p.device);
      e.mutable_event()->set_op(trace::EventOp::WAIT);
      e.mutable_event()->set_event(program ? q.program_event : q.event);
      e.mutable_event()->set_stream(p.stream);
      w.write(e);
    }
    if (p.posting_marker != 0) {   // where a later receive of its batch was posted (costs the host nothing)
      trace::Envelope create = call(p.device);
      create.mutable_event()->set_op(trace::EventOp::CREATE);
      create.mutable_event()->set_event(p.posting_marker);
      create.mutable_event()->set_flags(trace::kEventFlagRuntimeMarker | trace::kEventFlagDisableTiming);
      w.write(create);
      trace::Envelope e = call(p.device);
      e.mutable_event()->set_op(trace::EventOp::RECORD);
      e.mutable_event()->set_event(p.posting_marker);
      e.mutable_event()->set_stream(p.stream);
      w.write(e);
    }
    const double bytes = std::max(numberOr(n, "tensor_size", 0), numberOr(n, "comm_size", 0));
    switch (p.op) {
      case Op::kNone:
      case Op::kHost: break;
      case Op::kKernel: {
        const uint32_t name = nameId(n.name().empty() ? "kernel" : n.name(), w);
        trace::Envelope e = call(p.device);
        trace::KernelLaunch* k = e.mutable_kernel();
        k->set_name(name);
        k->set_stream(p.stream);
        // A foreign kernel: what the node says, its bytes read; cardsim's own: as recorded.
        k->set_kernel_class(static_cast<trace::KernelClass>(numberOr(n, "cardsim_kernel_class", trace::KERNEL_OTHER)));
        k->set_dtype(static_cast<trace::DataType>(numberOr(n, "cardsim_dtype", trace::DTYPE_FP32)));
        k->set_flops(numberOr(n, "num_ops", 0));
        k->set_bytes_read(numberOr(n, "cardsim_bytes_read", numberOr(n, "tensor_size", 0)));
        k->set_bytes_written(numberOr(n, "cardsim_bytes_written", 0));
        k->set_graph_node(numberOr(n, "cardsim_graph_node", 0) != 0);
        k->set_tiles(static_cast<uint32_t>(numberOr(n, "cardsim_tiles", 0)));
        w.write(e);
        break;
      }
      case Op::kStep: {
        trace::Envelope e = call(p.device);
        trace::Collective* c = e.mutable_collective();
        // A cardsim collective timed by its caller stays one; anything else is computation.
        const bool comm = text(n, "cardsim_kind") == "COLLECTIVE";
        c->set_op(comm ? n.name() : kComputeStepPrefix + (n.name().empty() ? std::string("step") : n.name()));
        c->set_pretimed(true);
        double ps = 0;
        c->set_seconds(number(n, "cardsim_duration_ps", &ps) ? ps * 1e-12 : n.duration_micros() * 1e-6);
        c->set_stream(p.stream);
        w.write(e);
        break;
      }
      case Op::kCopy: {
        const std::string kind = text(n, "cardsim_kind");
        trace::CopyKind k = trace::COPY_HOST_TO_DEVICE;
        if (n.type() == chakra::MEM_STORE_NODE || kind == "MEMCPY_DTOH") k = trace::COPY_DEVICE_TO_HOST;
        if (kind == "MEMCPY_DTOD") k = trace::COPY_DEVICE_TO_DEVICE;
        int src = k == trace::COPY_HOST_TO_DEVICE ? -1 : p.device, dst = k == trace::COPY_DEVICE_TO_HOST ? -1 : p.device;
        if (kind == "MEMCPY_PEER") {
          k = trace::COPY_PEER;
          src = static_cast<int>(numberOr(n, "cardsim_src_device", p.device));
          dst = static_cast<int>(numberOr(n, "cardsim_dst_device", p.device));
          devices = std::max({devices, src + 1, dst + 1});
        }
        trace::Envelope e = call(p.device);
        trace::Memcpy* m = e.mutable_memcpy();
        m->set_kind(k);
        m->set_bytes(static_cast<uint64_t>(bytes));
        m->set_src_device(src);
        m->set_dst_device(dst);
        m->set_stream(p.stream);
        m->set_async(!p.blocking);
        m->set_host_pinned(numberOr(n, "cardsim_host_pinned", 0) != 0);
        // One stand-in buffer per device and side, as large as its largest copy (the replay
        // grows it): copies move no bytes in a replay, and a block per node would hold the
        // sum of all the copies' sizes in device memory.
        m->set_src(src >= 0 ? standIn(1, src) : 0);
        m->set_dst(dst >= 0 ? standIn(2, dst) : 0);
        w.write(e);
        break;
      }
      case Op::kMemset: {
        trace::Envelope e = call(p.device);
        e.mutable_memset()->set_address(standIn(3, p.device));
        e.mutable_memset()->set_bytes(static_cast<uint64_t>(bytes));
        e.mutable_memset()->set_stream(p.stream);
        e.mutable_memset()->set_async(!p.blocking);
        w.write(e);
        break;
      }
      case Op::kCollective: {
        double type = -1;
        const char* op = number(n, "comm_type", &type) ? collectiveOp(static_cast<int64_t>(type)) : nullptr;
        if (op && text(n, "cardsim_op") == "barrier") op = "barrier";   // exported as an all-reduce
        if (!op) throw TraceError(where(n) + ": comm_type " + std::to_string(static_cast<int64_t>(type)) +
                                  " has no collective on the fabric (all_reduce, reduce, all_gather, broadcast, "
                                  "all_to_all, reduce_scatter, barrier)");
        const std::string pg = text(n, "pg_name");
        const std::vector<int> ranks = groupMembers(groups_, pg, rank_, world_, where(n), source_);
        trace::Envelope e = call(p.device);
        trace::Collective* c = e.mutable_collective();
        c->set_op(op);
        c->set_bytes(bytes);
        for (int r : ranks) c->add_ranks(r);
        c->set_group(pg);
        for (const char* key : {"cardsim_send_bytes", "cardsim_recv_bytes"}) {   // an uneven all_to_all's
          bool bad = false;
          const std::vector<double> row = byteList(n, key, &bad);
          if (bad || (!row.empty() && (row.size() != ranks.size() || std::string(op) != "all_to_all")))
            throw TraceError(where(n) + ": " + key + " '" + text(n, key) + "' is not one byte count per member (" +
                             std::to_string(ranks.size()) + ") of an all_to_all");
          for (double b : row) (key[8] == 's' ? c->add_send_bytes(b) : c->add_recv_bytes(b));
        }
        c->set_algorithm(text(n, "cardsim_algorithm"));
        c->set_dtype(text(n, "cardsim_dtype_name"));
        c->set_stream(p.stream);
        c->set_peers_late_ps(peersLatePs(n));
        w.write(e);
        break;
      }
      case Op::kSendRecv: {
        int src = -1, dst = -1;
        if (!pointToPointEnds(n, rank_, &src, &dst))
          throw TraceError(where(n) + ": a send or recv needs comm_src and comm_dst, two different ranks");
        trace::Envelope e = call(p.device);
        trace::Collective* c = e.mutable_collective();
        c->set_op("send_recv");
        c->set_bytes(bytes);
        c->add_ranks(src);
        c->add_ranks(dst);
        c->set_root(0);
        c->set_peer(1);
        c->set_group("p2p " + std::to_string(src) + "->" + std::to_string(dst));
        // Its side: joined with the other rank's on the fabric (a receive ends once its
        // send has begun and the bytes have crossed), matched by tag.
        c->set_p2p(n.type() == chakra::COMM_SEND_NODE ? trace::Collective::SEND : trace::Collective::RECV);
        c->set_tag(static_cast<int32_t>(numberOr(n, "comm_tag", 0)));
        c->set_posted_event(p.posted_event);
        c->set_stream(p.stream);
        c->set_peers_late_ps(peersLatePs(n));
        w.write(e);
        break;
      }
    }
    // An event created and recorded after the node, on its stream.
    auto recordAfter = [&](uint32_t event, uint32_t flags) {
      trace::Envelope create = call(p.device);
      create.mutable_event()->set_op(trace::EventOp::CREATE);
      create.mutable_event()->set_event(event);
      create.mutable_event()->set_flags(flags);
      w.write(create);
      trace::Envelope e = call(p.device);
      e.mutable_event()->set_op(trace::EventOp::RECORD);
      e.mutable_event()->set_event(event);
      e.mutable_event()->set_stream(p.stream);
      w.write(e);
    };
    if (p.program_event != 0) recordAfter(p.program_event, 0);
    // The replay's own ordering, not the workload's: a record that costs the host nothing,
    // which an export leaves out again (keeping the dependency it carries).
    if (p.record_after) recordAfter(p.event, trace::kEventFlagRuntimeMarker | trace::kEventFlagDisableTiming);
    written.insert(n.id());
  }
  // The run ends when every device is done (a rank given no work made no call: it ran nothing).
  for (int d : used) {
    trace::Envelope e = call(d);
    e.mutable_api()->set_api(trace::ApiCall::DEVICE_SYNCHRONIZE);
    w.write(e);
  }
  trace::End end;
  end.set_calls(calls_);
  end.set_reason("chakra import");
  w.close(end);
}

}  // namespace

bool isChakraPath(const std::string& path) {
  return (endsWith(path, ".et") && isFile(path)) || isFile(path + ".0.et");
}

ChakraImport importChakra(const std::string& path, const std::string& out_dir) {
  std::map<int, std::string> sources;
  std::string prefix;
  static const std::regex kRankFile(R"((.*)\.(\d+)\.et$)");
  std::smatch m;
  const bool one_file = endsWith(path, ".et") && isFile(path);
  if (one_file) {
    const bool numbered = std::regex_match(path, m, kRankFile);
    prefix = numbered ? m[1].str() : path.substr(0, path.size() - 3);
    sources[numbered ? std::stoi(m[2].str()) : 0] = path;
  } else {
    prefix = path;
    for (int r = 0; isFile(prefix + "." + std::to_string(r) + ".et"); ++r)
      sources[r] = prefix + "." + std::to_string(r) + ".et";
  }
  if (sources.empty()) throw TraceError(path + ": no Chakra trace (PREFIX.0.et) here");
  const auto groups = readGroups(prefix + ".comm_groups.json");

  ChakraImport out;
  std::map<int, EtFile> files;
  for (const auto& [rank, file] : sources) files[rank] = readEt(file);
  // The world: what cardsim's metadata says, else the files of the prefix (one file of a
  // job is one rank of it: replayed alone it needs --ranks, as a single .cstrace does).
  int siblings = 0;
  while (isFile(prefix + "." + std::to_string(siblings) + ".et")) ++siblings;
  out.world_size = std::max(static_cast<int>(sources.size()), siblings);
  std::string world_from = "its files";
  bool replicated = false;   // one rank's file standing for its world (cardsim replay --ranks N --keep)
  for (const auto& a : files.begin()->second.meta.attr()) {
    if (a.name() == "cardsim_replicated" && a.value_case() == chakra::AttributeProto::kInt64Val)
      replicated = a.int64_val() != 0;
    if (a.name() == "world_size" && a.value_case() == chakra::AttributeProto::kInt64Val && a.int64_val() > 0) {
      out.world_size = static_cast<int>(a.int64_val());
      world_from = "the metadata's world_size";
    }
    if (a.name() == "preset" && a.value_case() == chakra::AttributeProto::kStringVal) out.preset = a.string_val();
  }
  // A PREFIX stands for the whole job, as a trace directory does: every rank's file is there
  // (one .et file given alone is one rank standing for the job).
  if (!one_file && !(replicated && files.size() == 1) && static_cast<int>(files.size()) < out.world_size) {
    int missing = 0;
    while (files.count(missing)) ++missing;
    std::string here;   // every rank's file present, past the gap too
    for (int r = 0; r < std::min(out.world_size, kMaxDevices); ++r)
      if (isFile(prefix + "." + std::to_string(r) + ".et")) here += (here.empty() ? "" : ", ") + std::to_string(r);
    throw TraceError(prefix + "." + std::to_string(missing) + ".et: missing (the job has " +
                     std::to_string(out.world_size) + " ranks by " + world_from + "; the files of rank(s) " + here +
                     " are here); replay one .et file alone to let that rank stand for the job");
  }
  // A whole job's sends and receives pair up (source, destination, tag, size), else the
  // replay would wait for a side that never comes.
  if (static_cast<int>(files.size()) == out.world_size) {
    std::map<std::tuple<int, int, int64_t, double>, std::pair<int, std::string>> open;   // +1 send, -1 recv
    for (const auto& [rank, et] : files)
      for (const chakra::Node& n : et.nodes) {
        if (n.type() != chakra::COMM_SEND_NODE && n.type() != chakra::COMM_RECV_NODE) continue;
        int src = -1, dst = -1;
        if (!pointToPointEnds(n, rank, &src, &dst)) continue;   // refused with its node when converted
        auto& [count, example] = open[{src, dst, static_cast<int64_t>(numberOr(n, "comm_tag", 0)),
                                      numberOr(n, "comm_size", 0)}];
        count += n.type() == chakra::COMM_SEND_NODE ? 1 : -1;
        example = sources[rank] + ": node " + std::to_string(n.id()) + " ('" + n.name() + "')";
      }
    for (const auto& [key, v] : open)
      if (v.first != 0)
        throw TraceError(v.second + ": " + (v.first > 0 ? "a send from rank " : "a receive from rank ") +
                         std::to_string(std::get<0>(key)) + " to rank " + std::to_string(std::get<1>(key)) + " (tag " +
                         std::to_string(std::get<2>(key)) + ", " + std::to_string(static_cast<int64_t>(std::get<3>(key))) +
                         " bytes) has no matching " + (v.first > 0 ? "receive" : "send") + " in the job's files");
  }
  for (auto& [rank, et] : files) {
    const std::string file = out_dir + "/rank" + std::to_string(rank) + trace::kFileExtension;
    RankConverter(sources[rank], std::move(et), rank, out.world_size, groups).write(file, out.preset);
    out.files[rank] = file;
  }
  return out;
}

}  // namespace cardsim::replay
