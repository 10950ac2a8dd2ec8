#include "traces/export/ChakraWriter.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

#include "traces/export/HostChain.h"
#include "traces/export/OutputFile.h"
#include "traces/export/proto/chakra_et.pb.h"
#include "traces/lib/CapturedByGraph.h"
#include "traces/lib/PeersLate.h"
#include "traces/lib/TraceFormat.h"

namespace cardsim::timeline {

namespace {

namespace chakra = ChakraProtoMsg;

// The version of the Chakra schema these files follow (GlobalMetadata.version).
constexpr const char* kChakraVersion = "0.0.4";

// A new attribute of `n`; the caller sets its value in the type Chakra's readers expect.
std::string byteList(const google::protobuf::RepeatedField<double>& bytes) {
  std::string s;
  char b[32];
  for (double v : bytes) {
    std::snprintf(b, sizeof b, "%s%.17g", s.empty() ? "" : ",", v);
    s += b;
  }
  return s;
}

chakra::AttributeProto* attr(chakra::Node* n, const char* name) {
  chakra::AttributeProto* a = n->add_attr();
  a->set_name(name);
  return a;
}

// Chakra's type for a collective op; false for ops it has none for (pre-timed steps).
bool commType(const std::string& op, chakra::CollectiveCommType* t) {
  static const std::map<std::string, chakra::CollectiveCommType> kTypes = {
      {"all_reduce", chakra::ALL_REDUCE}, {"reduce", chakra::REDUCE},
      {"all_gather", chakra::ALL_GATHER}, {"gather", chakra::GATHER},
      {"scatter", chakra::SCATTER},       {"broadcast", chakra::BROADCAST},
      {"all_to_all", chakra::ALL_TO_ALL}, {"reduce_scatter", chakra::REDUCE_SCATTER},
      {"barrier", chakra::BARRIER},
  };
  auto it = kTypes.find(op);
  if (it == kTypes.end()) return false;
  *t = it->second;
  return true;
}

uint64_t micros(uint64_t ps) { return (ps + 500'000) / 1'000'000; }   // to the nearest µs

void putVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void appendDelimited(const google::protobuf::MessageLite& m, std::string* out) {
  const std::string bytes = m.SerializeAsString();
  putVarint(bytes.size(), out);
  out->append(bytes);
}

void writeFile(const std::string& path, const std::string& bytes) {
  writeOutputFile(path, [&](std::ostream& f) { f.write(bytes.data(), static_cast<std::streamsize>(bytes.size())); });
}

}  // namespace

std::map<std::size_t, std::size_t> ChakraWriter::capturedKernelCalls(std::size_t r) const {
  const auto& calls = run_.calls();
  const auto& commands = run_.commands();
  const auto& names = run_.ranks()[r].names;
  // What pairs a graph's command with its captured call: a kernel's name; a copy's or
  // memset's bytes (their commands' names are their kinds').
  auto capturedKey = [&](const trace::Envelope& e) {
    if (e.record_case() == trace::Envelope::kMemcpy) return "#copy " + std::to_string(e.memcpy().bytes());
    if (e.record_case() == trace::Envelope::kMemset) return "#set " + std::to_string(e.memset().bytes());
    auto it = names.find(e.kernel().name());
    return it == names.end() ? std::string() : it->second;
  };
  auto commandKey = [&](const RunTimeline::Command& c) {
    switch (c.command.kind()) {
      case trace::DeviceCommand::KERNEL: return c.name;
      case trace::DeviceCommand::MEMCPY_HTOD:
      case trace::DeviceCommand::MEMCPY_DTOH:
      case trace::DeviceCommand::MEMCPY_DTOD:
      case trace::DeviceCommand::MEMCPY_PEER: return "#copy " + std::to_string(c.command.bytes());
      case trace::DeviceCommand::MEMSET: return "#set " + std::to_string(c.command.bytes());
      default: return std::string();
    }
  };
  std::set<std::size_t> ran;   // calls that submitted a command
  for (const auto& c : commands)
    if (c.rank == r && c.call != RunTimeline::kNone) ran.insert(c.call);
  // Per graph, its captured kernels, copies and memsets (key, call), in capture order.
  trace::CapturedByGraph<std::pair<std::string, std::size_t>> captured;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].rank != r || calls[i].record.status() != 0) continue;
    const trace::Envelope& e = calls[i].record;
    if (e.record_case() == trace::Envelope::kGraph) {
      captured.graphOp(e.graph());
    } else if ((e.record_case() == trace::Envelope::kKernel || e.record_case() == trace::Envelope::kMemcpy ||
                e.record_case() == trace::Envelope::kMemset) &&
               captured.capturing() && !ran.count(i)) {
      const uint32_t on = e.record_case() == trace::Envelope::kKernel   ? e.kernel().stream()
                          : e.record_case() == trace::Envelope::kMemcpy ? e.memcpy().stream()
                                                                        : e.memset().stream();
      captured.add(on, {capturedKey(e), i});
    }
  }
  // ... by key, per graph a launch ran (built once each).
  std::map<uint32_t, std::map<std::string, std::vector<std::size_t>>> graphs;
  auto keyed = [&](uint32_t graph) -> const std::map<std::string, std::vector<std::size_t>>* {
    const auto* taken = captured.graph(graph);
    if (!taken) return nullptr;
    auto [it, created] = graphs.try_emplace(graph);
    if (created)
      for (const auto& [key, call] : *taken) it->second[key].push_back(call);
    return &it->second;
  };
  std::map<std::size_t, std::size_t> out;
  std::map<std::size_t, std::map<std::string, std::size_t>> used;   // per launch call: kernels taken, by name
  for (std::size_t i = 0; i < commands.size(); ++i) {
    const auto& c = commands[i];
    if (c.rank != r || c.call == RunTimeline::kNone) continue;
    const std::string key = commandKey(c);
    if (key.empty()) continue;
    const trace::Envelope& e = calls[c.call].record;
    if (e.record_case() != trace::Envelope::kGraph || e.graph().op() != trace::GraphOp::LAUNCH) continue;
    const auto* g = keyed(e.graph().graph());
    if (!g) continue;
    auto k = g->find(key);
    if (k == g->end()) continue;
    std::size_t& n = used[c.call][key];
    if (n < k->second.size()) out[i] = k->second[n++];
  }
  return out;
}

ChakraWriter::Summary ChakraWriter::write(const std::string& prefix) const {
  Summary s;
  const auto& commands = run_.commands();
  const auto& calls = run_.calls();

  // Process groups, numbered from 1 in the order of their keys (the same run gives the
  // same numbers), with their global ranks from the collective calls.
  std::map<std::string, std::vector<int>> group_ranks;
  for (const auto& c : commands) {
    if (c.command.kind() != trace::DeviceCommand::COLLECTIVE || c.call == RunTimeline::kNone) continue;
    const trace::Collective& coll = calls[c.call].record.collective();
    if (coll.op() == "send_recv") continue;   // a send/recv node names its peers, not a group
    std::vector<int>& ranks = group_ranks[c.group];
    if (ranks.empty()) ranks.assign(coll.ranks().begin(), coll.ranks().end());
  }
  std::map<std::string, int> group_id;
  for (const auto& [key, ranks] : group_ranks) group_id.emplace(key, static_cast<int>(group_id.size()) + 1);
  s.groups = group_id.size();

  uint64_t first_ps = UINT64_MAX;
  for (const auto& c : calls) first_ps = std::min(first_ps, c.record.host_begin_ps());
  for (const auto& c : commands) first_ps = std::min(first_ps, c.command.start_ps());
  if (first_ps == UINT64_MAX) first_ps = 0;

  std::map<std::size_t, std::vector<std::size_t>> waits_on;   // wait command -> record commands
  for (const auto& d : run_.dependencies())
    if (d.kind == RunTimeline::DependencyKind::kEventWait) waits_on[d.to].push_back(d.from);

  // What each collective call's rank waited there for slower ranks (PeersLate.h): a replay
  // of one rank's file standing for its job starts its replicas that much later.
  std::vector<uint64_t> peers_late(calls.size(), 0);
  {
    std::map<std::size_t, std::size_t> command_of;   // call -> its collective command
    for (std::size_t i = 0; i < commands.size(); ++i)
      if (commands[i].command.kind() == trace::DeviceCommand::COLLECTIVE && commands[i].call != RunTimeline::kNone)
        command_of.emplace(commands[i].call, i);
    std::map<std::size_t, trace::PeersLate> per_rank;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const trace::Envelope& e = calls[i].record;
      if (e.record_case() != trace::Envelope::kCollective || e.collective().pretimed() || e.status() != 0) continue;
      auto it = command_of.find(i);
      const trace::DeviceCommand* d = it != command_of.end() ? &commands[it->second].command : nullptr;
      const uint64_t start = d ? d->start_ps() : 0, end = d ? d->end_ps() : 0;
      peers_late[i] = per_rank[calls[i].rank].at(e, d ? &start : nullptr, d ? &end : nullptr);
    }
  }
  std::vector<std::pair<std::string, std::string>> outputs;   // (path, bytes), written at the end
  for (std::size_t r = 0; r < run_.ranks().size(); ++r) {
    const RunTimeline::Rank& rank = run_.ranks()[r];
    // The rank's commands in completion order (a dependency never completes after its
    // dependent), which numbers the nodes.
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < commands.size(); ++i)
      if (commands[i].rank == r) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const auto &ca = commands[a].command, &cb = commands[b].command;
      if (ca.end_ps() != cb.end_ps()) return ca.end_ps() < cb.end_ps();
      return ca.start_ps() < cb.start_ps();
    });

    const std::map<std::size_t, std::size_t> captured = capturedKernelCalls(r);
    // Pinned host memory the rank allocated (begin -> end): a copy's host side there is a
    // pinned copy, also in recordings from before copies said so (format 1.4).
    std::map<uint64_t, uint64_t> pinned;
    for (const auto& c : calls)
      if (c.rank == r && c.record.status() == 0 && c.record.record_case() == trace::Envelope::kAlloc &&
          c.record.alloc().kind() == trace::MEMORY_HOST_PINNED)
        pinned[c.record.alloc().address()] = c.record.alloc().address() + c.record.alloc().bytes();
    auto hostPinned = [&](const trace::Memcpy& m) {
      if (m.host_pinned()) return true;
      const uint64_t host_side = m.kind() == trace::COPY_HOST_TO_DEVICE   ? m.src()
                                 : m.kind() == trace::COPY_DEVICE_TO_HOST ? m.dst()
                                                                          : 0;
      auto it = pinned.upper_bound(host_side);
      return host_side != 0 && it != pinned.begin() && host_side < std::prev(it)->second;
    };

    // In submission order: stream predecessors and event waits.
    std::vector<std::size_t> submitted = order;
    std::stable_sort(submitted.begin(), submitted.end(), [&](std::size_t a, std::size_t b) {
      return commands[a].command.ready_ps() < commands[b].command.ready_ps();
    });
    std::map<std::pair<int, uint32_t>, std::size_t> last_on_stream;   // (device, stream) -> command
    std::map<std::size_t, std::set<std::size_t>> deps;                // node -> nodes
    for (std::size_t i : submitted) {
      const auto& d = commands[i].command;
      const std::pair<int, uint32_t> stream{d.device(), d.stream()};
      std::set<uint64_t>& mine = deps[i];
      auto prev = last_on_stream.find(stream);
      if (prev != last_on_stream.end()) mine.insert(prev->second);
      last_on_stream[stream] = i;
      for (std::size_t rec : waits_on[i])
        if (commands[rec].rank == r) mine.insert(rec);
      mine.erase(i);
    }
    // The runtime's own event records and waits (RunTimeline::Command::runtime_marker) are no
    // nodes: what depends on one depends on what it depended on. (Dependencies point back in
    // submission order, so the first pass in that order resolves chains of them; one that
    // ties with its dependent takes another.)
    bool any_marker = false;
    for (bool again = true; again;) {
      again = false;
      for (std::size_t i : submitted) {
        std::set<std::size_t>& mine = deps[i];
        std::set<std::size_t> through;
        for (auto it = mine.begin(); it != mine.end();) {
          if (!commands[*it].runtime_marker) {
            ++it;
            continue;
          }
          const std::set<std::size_t>& theirs = deps[*it];
          through.insert(theirs.begin(), theirs.end());
          it = mine.erase(it);
        }
        through.erase(i);
        for (std::size_t t : through) again = again || commands[t].runtime_marker;
        mine.insert(through.begin(), through.end());
        any_marker = any_marker || commands[i].runtime_marker;
      }
    }
    if (any_marker) {
      order.erase(std::remove_if(order.begin(), order.end(), [&](std::size_t i) { return commands[i].runtime_marker; }),
                  order.end());
      for (auto it = deps.begin(); it != deps.end();) it = commands[it->first].runtime_marker ? deps.erase(it) : std::next(it);
    }
    // The host's time between its calls: CPU nodes of their own, numbered past the commands
    // (node `host + h` is step h), chained one after another (HostChain.h).
    // A launch's kernels that a replay issues as a graph's nodes (what their captured launch
    // said, KernelCost.graph_node): no launch cost of their own, so the launch's is host time.
    std::set<std::size_t> graph_kernels;
    for (const auto& [cmd, launch] : captured)
      if (commands[cmd].command.kind() == trace::DeviceCommand::KERNEL &&
          calls[launch].record.record_case() == trace::Envelope::kKernel)
        graph_kernels.insert(cmd);
    const HostChain chain = hostChain(run_, r, order, graph_kernels);
    const std::size_t host = commands.size();
    for (std::size_t h = 0; h < chain.steps.size(); ++h) {
      std::set<std::size_t>& mine = deps[host + h];
      if (h > 0) mine.insert(host + h - 1);
      mine.insert(chain.steps[h].waits.begin(), chain.steps[h].waits.end());
    }
    for (const auto& [i, h] : chain.issued_after) deps[i].insert(host + h);
    auto endOf = [&](std::size_t i) {
      if (i >= host) return chain.steps[i - host].begin_ps + chain.steps[i - host].duration_ps;
      return commands[i].command.end_ps();
    };
    auto startOf = [&](std::size_t i) {
      return i >= host ? chain.steps[i - host].begin_ps : commands[i].command.start_ps();
    };
    for (std::size_t h = 0; h < chain.steps.size(); ++h) order.push_back(host + h);
    // Completion order again, the host's steps first where they end with a command.
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      if (endOf(a) != endOf(b)) return endOf(a) < endOf(b);
      if (startOf(a) != startOf(b)) return startOf(a) < startOf(b);
      return (a >= host) > (b >= host);
    });

    // Node numbers: a topological order, completion order where the dependencies leave a
    // choice (a wait of no duration can end at the very picosecond its record does).
    std::map<std::size_t, uint64_t> node_of;
    {
      std::map<std::size_t, std::size_t> position, missing;
      std::map<std::size_t, std::vector<std::size_t>> dependents;
      for (std::size_t p = 0; p < order.size(); ++p) position[order[p]] = p;
      for (const auto& [i, ds] : deps) {
        missing[i] = ds.size();
        for (std::size_t d : ds) dependents[d].push_back(i);
      }
      std::set<std::size_t> ready;   // by position in completion order
      for (std::size_t i : order)
        if (missing[i] == 0) ready.insert(position[i]);
      std::vector<std::size_t> numbered;
      while (!ready.empty()) {
        const std::size_t i = order[*ready.begin()];
        ready.erase(ready.begin());
        node_of[i] = numbered.size();
        numbered.push_back(i);
        for (std::size_t j : dependents[i])
          if (--missing[j] == 0) ready.insert(position[j]);
      }
      if (numbered.size() != order.size())   // cannot happen: every edge points back in time
        throw std::runtime_error("rank " + std::to_string(rank.rank) + ": the nodes' dependencies form a cycle");
      order = std::move(numbered);
    }

    // A receive posted where its batch of point-to-point calls began (its runtime marker, no
    // node): the node its stream ran first after that point, where that is not the receive.
    std::map<std::size_t, uint64_t> posted_before;
    {
      std::map<uint32_t, std::size_t> marker;                                // event -> its latest record
      std::map<std::pair<int, uint32_t>, std::vector<std::size_t>> open;      // stream -> markers awaiting a node
      std::map<std::size_t, std::size_t> after;                              // marker -> the node after it
      for (std::size_t i : submitted) {
        const RunTimeline::Command& c = commands[i];
        const std::pair<int, uint32_t> stream{c.command.device(), c.command.stream()};
        if (c.runtime_marker) {
          if (c.command.kind() == trace::DeviceCommand::EVENT_RECORD && c.event != 0) {
            marker[c.event] = i;
            open[stream].push_back(i);
          }
          continue;
        }
        for (std::size_t m : std::exchange(open[stream], {})) after[m] = i;
        if (c.command.kind() != trace::DeviceCommand::COLLECTIVE || c.call == RunTimeline::kNone) continue;
        const trace::Collective& coll = calls[c.call].record.collective();
        if (coll.p2p() != trace::Collective::RECV || coll.posted_event() == 0) continue;
        auto m = marker.find(coll.posted_event());
        if (m == marker.end()) continue;
        auto b = after.find(m->second);
        if (b != after.end() && b->second != i && node_of.count(b->second))
          posted_before[i] = node_of.at(b->second);
      }
    }

    std::string out;
    chakra::GlobalMetadata meta;
    meta.set_version(kChakraVersion);
    auto metaAttr = [&](const char* name, const std::string& v) {
      auto* a = meta.add_attr();
      a->set_name(name);
      a->set_string_val(v);
    };
    metaAttr("producer", "cardsim " + rank.header.cardsim_version());
    metaAttr("preset", rank.header.preset());
    metaAttr("device_name", rank.header.device_name());
    metaAttr("source", rank.file);
    // The run's settings a replay takes from its recording (the collectives' algorithm
    // preference, ...): a replay of the files takes them from here.
    for (const char* k : trace::kReplayedEnvironment)
      if (auto it = rank.header.environment().find(k); it != rank.header.environment().end())
        metaAttr((std::string("cardsim_env:") + k).c_str(), it->second);
    {
      auto* a = meta.add_attr();
      a->set_name("rank");
      a->set_int64_val(rank.rank);
      a = meta.add_attr();
      a->set_name("world_size");
      a->set_int64_val(rank.header.world_size());
      if (rank.header.replicated()) {   // rank 0 of a replay --ranks N, standing for all N
        a = meta.add_attr();
        a->set_name("cardsim_replicated");
        a->set_int64_val(1);
      }
    }
    appendDelimited(meta, &out);

    auto dependencies = [&](std::size_t i, chakra::Node* n) {
      std::vector<uint64_t> ids;
      for (std::size_t dep : deps[i]) ids.push_back(node_of[dep]);
      std::sort(ids.begin(), ids.end());
      for (uint64_t dep : ids) n->add_data_deps(dep);
      s.dependencies += static_cast<uint64_t>(n->data_deps_size());
    };
    for (std::size_t idx = 0; idx < order.size(); ++idx) {
      if (order[idx] >= host) {   // the host's time: a CPU node
        const HostStep& step = chain.steps[order[idx] - host];
        chakra::Node n;
        n.set_id(idx);
        n.set_name("host");
        n.set_type(chakra::COMP_NODE);
        n.set_start_time_micros(micros(step.begin_ps - std::min(first_ps, step.begin_ps)));
        n.set_duration_micros(micros(step.duration_ps));
        dependencies(order[idx], &n);
        attr(&n, "is_cpu_op")->set_bool_val(true);
        attr(&n, "cardsim_kind")->set_string_val("HOST");
        attr(&n, "cardsim_start_ps")->set_uint64_val(step.begin_ps);
        attr(&n, "cardsim_duration_ps")->set_uint64_val(step.duration_ps);
        if (!step.synchronized_devices.empty()) {   // a device synchronize's: the replay makes one
          std::string devices;
          for (int d : step.synchronized_devices) devices += (devices.empty() ? "" : ",") + std::to_string(d);
          attr(&n, "cardsim_synchronizes")->set_string_val(devices);
        }
        if (!step.syncs.empty()) {
          // The synchronizing calls before the node's time, in order (HostStep): "ps@dD" a
          // device synchronize of device D, "ps@I+J" one that waited for nodes I and J.
          std::string calls;
          for (const HostStep::SyncCall& c : step.syncs) {
            calls += (calls.empty() ? "" : ",") + std::to_string(c.duration_ps) + "@";
            if (c.device >= 0) {
              calls += "d" + std::to_string(c.device);
              continue;
            }
            std::vector<uint64_t> ids;
            for (std::size_t w : c.waits) ids.push_back(node_of[w]);
            std::sort(ids.begin(), ids.end());
            for (std::size_t k = 0; k < ids.size(); ++k) calls += (k ? "+" : "") + std::to_string(ids[k]);
          }
          attr(&n, "cardsim_sync_calls")->set_string_val(calls);
        }
        if (!step.marker_waits.empty()) {
          // The runtime's own event waits in the node's time (HostStep): "ps@D:S>N", stream S
          // of device D waited for node N (">N" left out where no node of the export is it).
          std::string waits;
          for (const HostStep::MarkerWait& m : step.marker_waits) {
            waits += (waits.empty() ? "" : ",") + std::to_string(m.duration_ps) + "@" + std::to_string(m.device) +
                     ":" + std::to_string(m.stream);
            if (m.node != RunTimeline::kNone && node_of.count(m.node)) waits += ">" + std::to_string(node_of.at(m.node));
          }
          attr(&n, "cardsim_marker_waits")->set_string_val(waits);
        }
        appendDelimited(n, &out);
        ++s.nodes;
        ++s.host_nodes;
        continue;
      }
      const RunTimeline::Command& c = commands[order[idx]];
      const trace::DeviceCommand& d = c.command;
      chakra::Node n;
      n.set_id(idx);
      n.set_name(c.name);
      n.set_start_time_micros(micros(d.start_ps() - std::min(first_ps, d.start_ps())));
      n.set_duration_micros(micros(d.end_ps() - std::min(d.end_ps(), d.start_ps())));
      dependencies(order[idx], &n);
      attr(&n, "is_cpu_op")->set_bool_val(false);
      switch (d.kind()) {
        case trace::DeviceCommand::COLLECTIVE: {
          const trace::Collective* coll = c.call != RunTimeline::kNone ? &calls[c.call].record.collective() : nullptr;
          chakra::CollectiveCommType type{};
          if (coll && coll->op() == "send_recv" && coll->ranks_size() >= 2) {
            const int src = coll->ranks(std::clamp(coll->root(), 0, coll->ranks_size() - 1));
            const int dst = coll->ranks(std::clamp(coll->peer(), 0, coll->ranks_size() - 1));
            n.set_type(rank.rank == src ? chakra::COMM_SEND_NODE : chakra::COMM_RECV_NODE);
            attr(&n, "comm_src")->set_int32_val(src);
            attr(&n, "comm_dst")->set_int32_val(dst);
            attr(&n, "comm_tag")->set_int32_val(static_cast<int32_t>(c.group_seq));
            attr(&n, "comm_size")->set_int64_val(static_cast<int64_t>(coll->bytes()));
            if (peers_late[c.call] > 0) attr(&n, "cardsim_peers_late_ps")->set_uint64_val(peers_late[c.call]);
            if (auto b = posted_before.find(order[idx]); b != posted_before.end())
              attr(&n, "cardsim_posted_before")->set_int64_val(static_cast<int64_t>(b->second));
            ++s.point_to_point_nodes;
          } else if (coll && commType(coll->op(), &type)) {
            n.set_type(chakra::COMM_COLL_NODE);
            // A barrier is an all-reduce of one element, as cardsim times it and as the
            // vendor libraries run it; ASTRA-sim has no BARRIER. The op rides along.
            if (type == chakra::BARRIER) {
              type = chakra::ALL_REDUCE;
              attr(&n, "cardsim_op")->set_string_val(coll->op());
            }
            attr(&n, "comm_type")->set_int64_val(type);
            attr(&n, "comm_size")->set_int64_val(static_cast<int64_t>(coll->bytes()));
            attr(&n, "pg_name")->set_string_val(std::to_string(group_id[c.group]));
            if (!coll->algorithm().empty()) attr(&n, "cardsim_algorithm")->set_string_val(coll->algorithm());
            if (!coll->dtype().empty()) attr(&n, "cardsim_dtype_name")->set_string_val(coll->dtype());
            // An uneven all_to_all's bytes to and from each member (comm_size is their sum):
            // Chakra has no field for them, ASTRA-sim skips attributes it does not know.
            if (coll->send_bytes_size() > 0) attr(&n, "cardsim_send_bytes")->set_string_val(byteList(coll->send_bytes()));
            if (coll->recv_bytes_size() > 0) attr(&n, "cardsim_recv_bytes")->set_string_val(byteList(coll->recv_bytes()));
            if (peers_late[c.call] > 0) attr(&n, "cardsim_peers_late_ps")->set_uint64_val(peers_late[c.call]);
            ++s.collective_nodes;
          } else {   // a step the caller timed itself: its duration is all there is
            n.set_type(chakra::COMP_NODE);
            ++s.pretimed_steps;
            ++s.compute_nodes;
          }
          break;
        }
        case trace::DeviceCommand::EVENT_RECORD:
        case trace::DeviceCommand::EVENT_WAIT:
          n.set_type(chakra::COMP_NODE);
          n.set_duration_micros(0);   // waiting is not work
          ++s.marker_nodes;
          break;
        default: {
          n.set_type(chakra::COMP_NODE);
          ++s.compute_nodes;
          // What cardsim replay needs to re-time the command as the model did (a graph's
          // kernel: what its captured launch said).
          const trace::Envelope* call = c.call != RunTimeline::kNone ? &calls[c.call].record : nullptr;
          bool graph_node = false;
          if (auto k = captured.find(order[idx]); k != captured.end()) {
            call = &calls[k->second].record;
            graph_node = true;
          }
          // A kernel whose launch the trace does not hold (a graph captured before the
          // recording began): its recorded duration is all there is, which a replay keeps.
          if (d.kind() != trace::DeviceCommand::KERNEL || (call && call->record_case() == trace::Envelope::kKernel)) {
            attr(&n, "num_ops")->set_int64_val(static_cast<int64_t>(d.flops()));
            attr(&n, "tensor_size")->set_uint64_val(d.bytes());
          }
          if (call && call->record_case() == trace::Envelope::kKernel) {
            const trace::KernelLaunch& k = call->kernel();
            // Dispatched as a graph's node (its latency, not a launch's): replayed so.
            if (graph_node || k.graph_node()) attr(&n, "cardsim_graph_node")->set_bool_val(true);
            attr(&n, "cardsim_kernel_class")->set_int64_val(k.kernel_class());
            attr(&n, "cardsim_dtype")->set_int64_val(k.dtype());
            attr(&n, "cardsim_bytes_read")->set_double_val(k.bytes_read());
            attr(&n, "cardsim_bytes_written")->set_double_val(k.bytes_written());
            attr(&n, "cardsim_tiles")->set_int64_val(k.tiles());
            // Chakra keeps shapes as text, "[[64, 256], [256, 256]]", inputs and outputs apart.
            if (k.shapes_size() > 0) {
              const int outs = std::min<int>(static_cast<int>(k.output_shapes()), k.shapes_size());
              auto shapesText = [&](int from, int to) {
                std::string t = "[";
                for (int i = from; i < to; ++i) {
                  t += i > from ? ", [" : "[";
                  for (int j = 0; j < k.shapes(i).dims_size(); ++j)
                    t += (j ? ", " : "") + std::to_string(k.shapes(i).dims(j));
                  t += "]";
                }
                return t + "]";
              };
              n.mutable_inputs()->set_shapes(shapesText(0, k.shapes_size() - outs));
              n.mutable_outputs()->set_shapes(shapesText(k.shapes_size() - outs, k.shapes_size()));
            }
          } else if (call && call->record_case() == trace::Envelope::kMemcpy) {
            attr(&n, "cardsim_src_device")->set_int64_val(call->memcpy().src_device());
            attr(&n, "cardsim_dst_device")->set_int64_val(call->memcpy().dst_device());
            attr(&n, "cardsim_host_pinned")->set_int64_val(hostPinned(call->memcpy()) ? 1 : 0);
          }
          // A copy or memset the host waited for in its call (its host node comes after it).
          if (!graph_node && call &&
              ((call->record_case() == trace::Envelope::kMemcpy && !call->memcpy().async()) ||
                       (call->record_case() == trace::Envelope::kMemset && !call->memset().async())))
            attr(&n, "cardsim_blocking")->set_bool_val(true);
          break;
        }
      }
      attr(&n, "cardsim_kind")->set_string_val(trace::DeviceCommand::Kind_Name(d.kind()));
      attr(&n, "cardsim_device")->set_int64_val(d.device());
      attr(&n, "cardsim_stream")->set_int64_val(d.stream());
      attr(&n, "cardsim_start_ps")->set_uint64_val(d.start_ps());
      // Where its call began on the host: a replay issues the calls one step of the host
      // allows in that order, as the program did.
      if (c.call != RunTimeline::kNone) attr(&n, "cardsim_call_ps")->set_uint64_val(calls[c.call].record.host_begin_ps());
      const bool marker = d.kind() == trace::DeviceCommand::EVENT_RECORD || d.kind() == trace::DeviceCommand::EVENT_WAIT;
      // Which of the program's events (a replay waits on the record of the same one).
      if (marker && c.event != 0) attr(&n, "cardsim_event")->set_int64_val(c.event);
      attr(&n, "cardsim_duration_ps")->set_uint64_val(marker ? 0 : d.end_ps() - std::min(d.end_ps(), d.start_ps()));
      appendDelimited(n, &out);
      ++s.nodes;
    }
    outputs.emplace_back(prefix + "." + std::to_string(rank.rank) + ".et", std::move(out));
  }

  // ASTRA-sim's --comm-group-configuration: {"<pg_name>": [global ranks], ...}.
  std::string json = "{";
  for (const auto& [key, id] : group_id) {
    json += (json.size() > 1 ? ", \"" : "\"") + std::to_string(id) + "\": [";
    const std::vector<int>& ranks = group_ranks[key];
    for (std::size_t i = 0; i < ranks.size(); ++i) json += (i ? ", " : "") + std::to_string(ranks[i]);
    json += "]";
  }
  json += "}\n";
  outputs.emplace_back(prefix + ".comm_groups.json", std::move(json));
  // Every file is made before any is written; one that cannot be written takes those
  // written before it away again: the export is whole or not there.
  try {
    for (const auto& [path, bytes] : outputs) {
      writeFile(path, bytes);
      s.files.push_back(path);
    }
  } catch (...) {
    for (const std::string& path : s.files) std::remove(path.c_str());
    throw;
  }
  return s;
}

}  // namespace cardsim::timeline
