// The `sim` backend: collectives timed by the fabric model, alone or, with a fabric server,
// joined across the ranks of a job.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <thread>

#include "SimBackend.h"
#include "simulator/FabricClient.h"
#include "simulator/FabricServer.h"

namespace cardsim::shim::simbackend {

namespace {

// One server and one connection per process. Never deleted: they are stopped at exit
// (before static destructors, which would race their threads), then left alone.
std::mutex g_fabric_mutex;
sim::FabricServer* g_server = nullptr;
sim::FabricClient* g_client = nullptr;

void stopFabricAtExit() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::atexit([] {
      sim::FabricClient* client;
      sim::FabricServer* server;
      {
        std::lock_guard<std::mutex> lock(g_fabric_mutex);
        client = g_client;
        server = g_server;
      }
      if (client) client->close();
      if (server) {
        // The rank hosting the server ends first more often than not (it raised the same
        // error the others are about to get, or simply finished first, while groups without
        // it go on): keep serving while other ranks are connected and the server is busy
        // (a collective pending: it completes or meets its process group's timeout) or was
        // so in the last few seconds, so that a late arrival gets its collective's real
        // answer or error rather than a closed socket.
        using Clock = std::chrono::steady_clock;
        sim::FabricServer::Stats last = server->stats();
        auto last_change = Clock::now();
        for (;;) {
          const sim::FabricServer::Stats now = server->stats();
          if (now.connections_open == 0) break;
          if (now.collectives_completed != last.collectives_completed ||
              now.collectives_failed != last.collectives_failed || now.collectives_pending != last.collectives_pending)
            last_change = Clock::now();
          last = now;
          if (now.collectives_pending == 0 && Clock::now() - last_change > std::chrono::seconds(5)) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        // Answers already computed still reach the other ranks before the server goes.
        server->stop(2.0);
      }
    });
  });
}

sim::FabricClient* fabricClient() {
  std::lock_guard<std::mutex> lock(g_fabric_mutex);
  return g_client;
}

std::string groupKey(const CollectiveDesc& desc) {
  if (!desc.group.empty()) return desc.group;
  std::string key;
  for (int r : desc.ranks) key += (key.empty() ? "" : ",") + std::to_string(r);
  return key;
}

// A point-to-point transfer's sequence on the server: each (source, destination, tag) of a
// group is its own, numbered in call order on each side (as the libraries match them).
std::string pointToPointKey(const CollectiveDesc& desc) {
  const auto at = [&](int i) { return std::to_string(desc.ranks[static_cast<size_t>(i)]); };
  return groupKey(desc) + " p2p " + at(desc.root) + ">" + at(desc.peer) + " tag " + std::to_string(desc.tag);
}

// An uneven all_to_all timed on this rank alone (CollectiveDesc::send_bytes): the others'
// sends are not known here, so each member is taken to send as `self` (a global rank) does,
// rotated: member i sends member i + k what `self` sends its k-th next. Every member then
// sends and receives what this one sends.
std::vector<double> rotatedPairs(const CollectiveDesc& desc, int self) {
  const size_t n = desc.ranks.size();
  const size_t me = static_cast<size_t>(std::find(desc.ranks.begin(), desc.ranks.end(), self) - desc.ranks.begin()) % n;
  std::vector<double> out(n * n, 0.0);
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < n; ++k) out[i * n + (i + k) % n] = desc.send_bytes[(me + k) % n];
  return out;
}

}  // namespace

Status SimBackend::fabricServe(const std::string& bind, uint16_t port, uint16_t* bound_port,
                               std::string* local_address) {
  if (!fabric_) return Status(Code::NotSupported, "fabricServe: " + fabric_error_);
  std::lock_guard<std::mutex> lock(g_fabric_mutex);
  if (g_server) {
    if (bound_port) *bound_port = g_server->port();
    if (local_address) *local_address = g_server->localAddress();
    return Status::Ok();
  }
  sim::FabricServer::Options o;
  o.preset = sim_.options().preset;
  o.bind = bind.empty() ? "127.0.0.1" : bind;
  o.port = port;
  o.local = true;
  // CARDSIM_FABRIC_LOG=1: the server's log (ranks joining and leaving, late answers) on the
  // hosting rank's stderr, as `cardsim fabricd` prints it.
  if (const char* env = std::getenv("CARDSIM_FABRIC_LOG")) o.log = std::string(env) == "1";
  if (const char* env = std::getenv("CARDSIM_FABRIC_SETTLE_S")) {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (end == env || *end != '\0' || !(v >= 0) || v > 3600)
      return Status(Code::InvalidValue, std::string("fabricServe: CARDSIM_FABRIC_SETTLE_S must be 0..3600 seconds, got '") +
                                            env + "'");
    o.settle_s = v;
  }
  try {
    auto server = std::make_unique<sim::FabricServer>(fabric_->params(), o);
    server->start();
    g_server = server.release();
  } catch (const std::exception& e) {
    return Status(Code::InitFailed, std::string("fabricServe: ") + e.what());
  }
  stopFabricAtExit();
  if (bound_port) *bound_port = g_server->port();
  if (local_address) *local_address = g_server->localAddress();
  return Status::Ok();
}

Status SimBackend::fabricConnect(const std::string& address, const std::string& job, int rank, int world_size,
                                 double connect_timeout_s) {
  if (!fabric_) return Status(Code::NotSupported, "fabricConnect: " + fabric_error_);
  // CARDSIM_FABRIC_REVISE=0: this rank's answered collectives keep their ends (as before
  // fabric protocol 5; a replay of an older recording sets it).
  if (const char* env = std::getenv("CARDSIM_FABRIC_REVISE")) {
    const std::string v = env;
    if (v != "0" && v != "1")
      return Status(Code::InvalidValue, "fabricConnect: CARDSIM_FABRIC_REVISE must be 0 or 1, got '" + v + "'");
    fabric_revise_ = v == "1";
  }
  if (rank < 0 || world_size < 1 || rank >= world_size)
    return Status(Code::InvalidValue, "fabricConnect: rank " + std::to_string(rank) + " is outside a world of " +
                                          std::to_string(world_size));
  if (const fabric::FabricParams& fp = fabric_->params();
      fp.nodes_set && static_cast<uint64_t>(fp.nodes) * fp.devices_per_node < static_cast<uint64_t>(world_size))
    return Status(Code::InvalidValue, "fabricConnect: " + std::to_string(fp.nodes) + " node(s) of " +
                                          std::to_string(fp.devices_per_node) + " devices (CARDSIM_NODES or " +
                                          "fabric.nodes) cannot hold a job of " + std::to_string(world_size) +
                                          " ranks; set more nodes, or leave the count unset to fit the job");
  std::lock_guard<std::mutex> lock(g_fabric_mutex);
  if (g_client) {
    if (g_client->address() == address) return Status::Ok();
    return Status(Code::InvalidValue, "fabricConnect: this process is already connected to the fabric server at " +
                                          g_client->address() + " (asked for " + address + ")");
  }
  sim::FabricClient::Identity who;
  who.job = job;
  who.rank = static_cast<uint32_t>(rank);
  who.world_size = static_cast<uint32_t>(world_size);
  who.preset = sim_.options().preset;
  who.fabric = fabric::fabricSignature(fabric_->params());
  try {
    g_client = new sim::FabricClient(address, who, connect_timeout_s > 0 ? connect_timeout_s : 30.0);
  } catch (const std::exception& e) {
    return Status(Code::CommFailed, std::string("fabricConnect: ") + e.what());
  }
  stopFabricAtExit();
  return Status::Ok();
}

Status SimBackend::fabricAddress(std::string* address) {
  if (!address) return nullArg("fabricAddress", "address");
  std::lock_guard<std::mutex> lock(g_fabric_mutex);
  *address = g_client ? g_client->address() : std::string();
  return Status::Ok();
}

Status SimBackend::fabricPark(bool parked) {
  if (sim::FabricClient* client = fabricClient()) client->park(parked);
  return Status::Ok();
}

Status SimBackend::fabricGone(const std::vector<int>& ranks, double timeout_s,
                              std::vector<std::pair<int, std::string>>* gone) {
  sim::FabricClient* client = fabricClient();
  if (!client) return Status(Code::NotSupported, "fabricGone: no fabric server");
  try {
    *gone = client->goneOf(ranks, timeout_s);
  } catch (const std::exception& e) {
    return Status(Code::CommFailed, e.what());
  }
  return Status::Ok();
}

void SimBackend::settleFabricAnswers() {
  if (!answers_.any()) return;
  sim::FabricClient* client = fabricClient();
  if (!client) return;   // (pending ones need a client: none without one)
  answers_.settleAll(*client, [&](const FabricAnswers::Pending& p, const sim::FabricClient::Completion& done) {
    applyAnswer(p.collective, p.end, done);
  });
}

// The server's answer to `c`: its command's end and the earlier ends it moved. Until the
// simulation passes it, a later answer may move this one's end (and may have moved earlier
// ones: applied before this rank's simulation goes on).
void SimBackend::applyAnswer(const sim::FabricClient::Collective& c, const std::shared_ptr<model::CollectiveEnd>& end,
                             const sim::FabricClient::Completion& done) {
  end->end_ps.store(done.end_ps);
  if (fabric_revise_) {
    for (const auto& r : done.revised) sim_.moveCollectiveEnd(r.group, r.seq, r.end_ps);
    sim_.holdCollectiveEnd(c.group, c.seq, end);
  }
  if (!done.note.empty()) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) std::fprintf(stderr, "cardsim: %s\n", done.note.c_str());
  }
}

Status SimBackend::fabricSettle() {
  settleFabricAnswers();
  if (std::string why = answers_.takeFailure(); !why.empty()) return Status(Code::CommFailed, why);
  return Status::Ok();
}

Status SimBackend::fabricDisconnect() {
  // Closed, not deleted: the exit handler may still reach it (close() is idempotent).
  if (sim::FabricClient* client = fabricClient()) client->close();
  return Status::Ok();
}

// Where this process's devices are the job's ranks (every rank sees the node's cards, the
// job no larger than them: the rule by which a collective's links are this process's too),
// a copy between two of them crosses the links the server's collectives cross: it arrives
// there as traffic from when its stream gets to it, as a collective's arrival does. A copy
// submitted after a collective was answered does not change that answer (the collective
// still holds the copy back, in this process's FabricLinks).
void SimBackend::reportPeerCopy(StreamObject* s, int src_device, int dst_device, std::size_t bytes) {
  sim::FabricClient* client = fabricClient();
  if (!client || !fabric_ || bytes == 0 || src_device == dst_device) return;
  if (client->worldSize() > sim_.deviceCount()) return;
  const model::TimePs free_at = sim_.queueFreeAt(dev(s->device), s->queue);
  const model::TimePs ready = sim_.hostNow() + model::secondsToPs(params_.host.memcpy_overhead_s);
  client->traffic(src_device, dst_device, static_cast<double>(bytes), std::max(free_at, ready));
}

Status SimBackend::launchFabricCollective(Stream stream, const CollectiveDesc& desc, double* seconds,
                                          std::string* algorithm) {
  StreamObject* s = nullptr;
  if (Status st = resolve(stream, "launchFabricCollective", &s); !st.ok()) return st;
  if (!fabric_)
    return Status(Code::NotSupported, "launchFabricCollective '" + desc.op + "': " + fabric_error_);
  // A named algorithm is run or refused; CARDSIM_COLL_ALGO, else fabric.algorithm, is a
  // preference, left to the tuner for the collectives that algorithm does not do (a job's
  // all_gathers under CARDSIM_COLL_ALGO=tree, its sends under =switch).
  std::string algo = desc.algorithm;
  const bool preferred = algo.empty();
  if (preferred) {
    const char* env = std::getenv("CARDSIM_COLL_ALGO");
    algo = env && *env ? env : fabric_->params().algorithm;
  }
  sim::FabricModel::Timed t;
  fabric::CollectiveOp op;
  // A process driving several cards has their fabric links in its model (peer copies cross
  // them): the collective's traffic on each link holds its copies back while it runs. Only
  // a collective among this process's devices is laid out link by link for it (one over a
  // thousand ranks would cost that per call, for the few links this process has).
  sim::FabricModel::LinkLoads loads;
  bool local_links = sim_.deviceCount() > 1;
  for (int r : desc.ranks) local_links = local_links && r >= 0 && static_cast<uint32_t>(r) < sim_.deviceCount();
  sim::FabricClient* client = fabricClient();
  // This rank on the fabric: its global rank when joined, else its device (one process, every member).
  const int self = client ? static_cast<int>(client->rank()) : s->device;
  std::vector<double> pairs;
  try {
    // Validates the request here, before any other rank depends on it.
    op = fabric::parseOp(desc.op);
    for (const std::vector<double>* given : {&desc.send_bytes, &desc.recv_bytes})
      if (!given->empty() && (op != fabric::CollectiveOp::AllToAll || given->size() != desc.ranks.size()))
        throw std::invalid_argument("per-member sizes are for all_to_all, one per member (" +
                                    std::to_string(desc.ranks.size()) + "), got " + std::to_string(given->size()));
    if (!desc.send_bytes.empty()) pairs = rotatedPairs(desc, self);
    t = fabric_->time(op, desc.bytes, desc.ranks, static_cast<uint32_t>(std::max(desc.root, 0)),
                      static_cast<uint32_t>(std::max(desc.peer, 0)), algo, local_links ? &loads : nullptr,
                      preferred, pairs.empty() ? nullptr : &pairs);
  } catch (const std::exception& e) {
    return Status(Code::InvalidValue, "launchFabricCollective '" + desc.op + "': " + e.what());
  }
  model::Command cmd;
  cmd.kind = CommandKind::Collective;
  cmd.duration_ps = model::secondsToPs(t.seconds);
  cmd.memory_bytes = fabric::memoryBytesPerMember(op, desc.bytes, static_cast<uint32_t>(desc.ranks.size()));
  if (!desc.send_bytes.empty()) {
    // What it sends is read, what it receives written: taken to be as much (its own sends).
    double sent = 0;
    for (size_t i = 0; i < desc.send_bytes.size(); ++i)
      if (desc.ranks[i] != self) sent += desc.send_bytes[i];
    cmd.memory_bytes = 2 * sent;
  }
  for (const auto& [link, use] : loads)
    if (use.bytes > 0) cmd.link_bytes.emplace_back(link, use.bytes);
  const std::string name = desc.op + ":" + t.algorithm;
  double took = t.seconds;
  using P2P = CollectiveDesc::PointToPoint;
  const bool p2p = op == fabric::CollectiveOp::SendRecv && desc.p2p != P2P::None;
  if (desc.p2p != P2P::None && (op != fabric::CollectiveOp::SendRecv || desc.ranks.size() != 2 || desc.root < 0 ||
                                desc.root > 1 || desc.peer < 0 || desc.peer > 1 || desc.root == desc.peer))
    return Status(Code::InvalidValue, "launchFabricCollective '" + desc.op +
                                          "': a point-to-point side needs op send_recv over ranks [source, destination] "
                                          "(root and peer 0 and 1)");
  model::TimePs posted_at = 0;
  if (desc.posted) {
    if (Status st = checkEvent(desc.posted, "launchFabricCollective"); !st.ok()) return st;
    model::QueuePoint point;
    std::shared_ptr<model::EventSlot> slot;
    {
      std::lock_guard<std::mutex> lock(desc.posted->mutex);
      if (!desc.posted->recorded)
        return Status(Code::InvalidHandle, "launchFabricCollective: the event of the receive's posting was never recorded");
      point = desc.posted->point;
      slot = desc.posted->slot;
    }
    // Run to it (it is behind this stream's work already queued), without moving the host.
    if (Status st = guard([&] { sim_.reach(point); return Status::Ok(); }); !st.ok()) return st;
    posted_at = slot->time_ps.load();
  }
  const bool joined = client && desc.ranks.size() > 1 && (op != fabric::CollectiveOp::SendRecv || p2p) && !capturing(s);
  // Joined, this process issues its own member's command alone; else (one process driving
  // every member) each member's command carries its share of the collective's traffic.
  cmd.link_share = joined || desc.ranks.empty() ? 1.0 : 1.0 / static_cast<double>(desc.ranks.size());
  // The collective is its stream's from the call's start: the library's host work for it
  // (the launch overhead) overlaps its first steps, so events around one collective on an
  // idle stream read the model's time for it. It ends no earlier than that work does (on
  // every member: the last member's). CARDSIM_COLL_START=launched: from the launch's end,
  // as recordings before trace format 1.3 were made.
  bool from_call = true;
  if (Status st = collectiveStartsAtCall(&from_call); !st.ok()) return st;
  const model::TimePs call_ps = sim_.hostNow();
  const model::TimePs launched_ps = call_ps + model::secondsToPs(params_.host.launch_overhead_s);
  if (joined) {
    const model::TimePs free_at = sim_.queueFreeAt(model::DeviceId{static_cast<uint32_t>(s->device)}, s->queue);
    const model::TimePs ready = from_call ? call_ps + 1 : launched_ps;
    sim::FabricClient::Collective c;
    c.group = p2p ? pointToPointKey(desc) : groupKey(desc);
    c.ranks = desc.ranks;
    c.seq = client->nextSeq(c.group);
    c.op = fabric::opName(op);
    c.bytes = desc.bytes;
    c.root = static_cast<uint32_t>(std::max(desc.root, 0));
    c.peer = static_cast<uint32_t>(std::max(desc.peer, 0));
    c.algorithm = t.tuned ? std::string() : algo;   // the server times what this rank timed
    // A receive may start once it was posted, even if this stream has moved on since.
    c.arrival_ps = desc.posted && desc.p2p == P2P::Recv ? posted_at : std::max(free_at, ready);
    c.timeout_s = desc.timeout_s;
    // Never revisable with revisions off: as if the simulation had run past every end.
    c.sealed_ps = fabric_revise_ ? sim_.sealedPs() : std::numeric_limits<uint64_t>::max();
    c.launched_ps = from_call ? launched_ps : 0;
    c.send_bytes = desc.send_bytes;
    c.recv_bytes = desc.recv_bytes;
    c.device = fabricDeviceOf(*client, s->device);
    c.refused = desc.refused;
    if (op == fabric::CollectiveOp::AllReduce || op == fabric::CollectiveOp::Reduce ||
        op == fabric::CollectiveOp::ReduceScatter) {   // what moves bytes may reinterpret them
      c.dtype = desc.dtype;
      c.reduce_op = desc.reduce_op;
    }
    try {
      if (desc.p2p == P2P::Send) {
        client->post(c);   // buffered: the send takes its own time from its own arrival
      } else if (desc.answer_later && desc.p2p == P2P::None && sim_.callerDriven()) {
        // Answered later (FabricAnswers.h): pending before its command is submitted.
        cmd.end = std::make_shared<model::CollectiveEnd>();
        cmd.end->end_ps.store(std::numeric_limits<model::TimePs>::max());
        const uint64_t ticket = client->arrive(c);
        answers_.add(FabricAnswers::Pending{ticket, c, cmd.end, std::this_thread::get_id()});
      } else {
        const sim::FabricClient::Completion done = client->collective(c);
        cmd.end = std::make_shared<model::CollectiveEnd>();
        applyAnswer(c, cmd.end, done);
        took = done.alone_s;
      }
    } catch (const std::exception& e) {
      return Status(Code::CommFailed, e.what());
    }
  }
  if (!joined) cmd.duration_ps += desc.peers_late_ps;
  if (seconds) *seconds = took;
  if (algorithm) *algorithm = t.algorithm;
  if (capturing(s)) return record(s, name, nullptr, std::move(cmd));
  if (!from_call) return submitAndMaybeWait(s, std::move(cmd), name, params_.host.launch_overhead_s, false);
  // In at the call's start (1 ps in: a call's commands land strictly inside it), the rest of
  // the launch overhead after; timed here alone, it too ends no earlier than its issue.
  if (!cmd.end) cmd.end_not_before_ps = launched_ps;
  constexpr double kOnePs = 1e-12;
  model::QueuePoint point;
  if (Status st = submit(s, std::move(cmd), name, kOnePs, &point); !st.ok()) return st;
  sim_.hostAdvance(std::max(0.0, params_.host.launch_overhead_s - kOnePs));
  if (op != fabric::CollectiveOp::Barrier) return Status::Ok();
  // A barrier holds its caller until it completes, as the libraries' and torch's do: every
  // member's host then stands at its end, the launch overhead of the last covered by it.
  return guard([&] {
    sim_.waitFor({point}, 0);
    return Status::Ok();
  });
}

// Where the fabric times this rank's collectives: a process that sees a whole node's cards
// runs its rank on the card it chose (`deepspeed --include localhost:0,2` puts rank 1 on
// chip 2, its device numbered physically), on its rank's node (node r / n); one that sees
// fewer (a launcher's one card per rank) on its rank's device, r (-1: the server's rule).
int SimBackend::fabricDeviceOf(const sim::FabricClient& client, int device) const {
  const uint32_t per = fabric_->params().devices_per_node;
  if (per == 0 || sim_.deviceCount() < per || device < 0) return -1;
  return static_cast<int>(client.rank() / per * per + static_cast<uint32_t>(device) % per);
}

// CARDSIM_COLL_START: where a collective may start on its stream, at its call ("call", the
// default) or after its launch overhead ("launched": as recordings before trace format 1.3
// were made, a barrier then not holding its caller either).
// Read once per process (a job sets it before the first collective), not on every call.
Status SimBackend::collectiveStartsAtCall(bool* from_call) {
  static const std::string setting = [] {
    const char* env = std::getenv("CARDSIM_COLL_START");
    return std::string(env ? env : "");
  }();
  if (setting.empty() || setting == "call") {
    *from_call = true;
  } else if (setting == "launched") {
    *from_call = false;
  } else {
    return Status(Code::InvalidValue,
                  "launchFabricCollective: CARDSIM_COLL_START must be call or launched, got '" + setting + "'");
  }
  return Status::Ok();
}

}  // namespace cardsim::shim::simbackend
