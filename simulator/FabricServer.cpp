#include "simulator/FabricServer.h"

#include <boost/asio.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "device_models/Command.h"
#include "simulator/FabricDecode.h"
#include "simulator/FabricModel.h"
#include "simulator/FabricWire.h"
#include "simulator/proto/fabric.pb.h"

namespace cardsim::sim {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
namespace rpc = cardsim::fabric_rpc;

namespace {

std::string rankList(const std::vector<int>& ranks) {
  // Long groups are abbreviated: a message naming 1024 ranks helps nobody.
  std::string s = "[";
  const size_t n = ranks.size();
  for (size_t i = 0; i < n; ++i) {
    if (n > 16 && i == 8) {
      s += "... " + std::to_string(n - 12) + " more, ";
      i = n - 4;
    }
    s += (i && s.back() != ' ' ? ", " : "") + std::to_string(ranks[i]);
  }
  return s + "]";
}

// Ranks of an all_to_all may send different amounts (all_to_all_single with splits).
bool unevenOk(const std::string& op) { return op == "all_to_all"; }

// Bounds on joint timing (transfer by transfer): members summed over the collectives timed
// together, and collectives remembered as still running.
constexpr size_t kMaxJointMembers = 512;
constexpr size_t kMaxInFlight = 64;

}  // namespace

struct Session;

struct Pending {
  std::string group;
  std::vector<int> ranks;
  uint64_t seq = 0;
  std::string op;
  double bytes = 0;
  uint32_t root = 0, peer = 0;
  std::string algorithm;
  struct Arrival {
    std::weak_ptr<Session> session;
    uint64_t id = 0;
    uint64_t arrival_ps = 0;
    bool answer = true;             // false: the eager side of a point-to-point transfer
  };
  std::map<int, Arrival> arrived;   // by global rank
  bool p2p = false;                 // a point-to-point transfer: answered as soon as both are in
  std::unique_ptr<asio::steady_timer> timer;
  bool ready = false;               // every member has arrived; answered at the next settle
  uint64_t start_ps = 0;            // the latest arrival, once ready

  std::string what() const { return op + " #" + std::to_string(seq) + " of process group " + rankList(ranks); }
};

// A collective answered whose end may still overlap later ones: they share links with it.
struct InFlight {
  FabricModel::Request request;
  uint64_t start_ps = 0, end_ps = 0;
};

struct Job {
  std::map<int, std::string> gone;           // rank -> why it left
  std::map<std::string, Pending> pending;    // by group key and sequence number
  int sessions = 0;
  uint32_t world = 0;                        // from the ranks' Hello
  std::map<int, int> waiting;                // rank -> its arrivals not answered yet
  std::set<int> parked;                      // ranks waiting outside the server (Park)
  std::set<int> connected;
  // Connected ranks neither waiting nor parked, and since when: what holds a settle. Kept
  // as ranks change state, so that a collective's cost does not grow with the job's size.
  std::map<int, std::chrono::steady_clock::time_point> active;
  std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();

  // Recomputes whether `rank` is active after a change of its state.
  void refresh(int rank) {
    const bool busy = connected.count(rank) && !parked.count(rank) && !waiting.count(rank);
    if (!busy) active.erase(rank);
    else if (!active.count(rank)) active.emplace(rank, std::chrono::steady_clock::now());
  }
  std::vector<InFlight> in_flight;
  std::unique_ptr<asio::steady_timer> settle_timer;
};

struct FabricServer::Impl {
  Impl(fabric::FabricParams params, Options o)
      : acceptor(io), signature(fabric::fabricSignature(params)), model(std::move(params)), options(std::move(o)) {}

  asio::io_context io;
  tcp::acceptor acceptor;
  std::string signature;   // fabric::fabricSignature of the model's parameters
  FabricModel model;
  Options options;
  std::thread thread;
  bool running = false;                   // start() or run() was called and stop() not yet
  std::promise<void> finished;            // set when the serving loop returns

  // Owned by the serving thread.
  std::map<std::string, Job> jobs;
  std::set<std::shared_ptr<Session>> sessions;
  std::map<std::pair<std::string, int>, std::weak_ptr<Session>> by_rank;
  bool stopping = false;

  std::atomic<uint64_t> completed{0}, failed{0}, accepted{0}, open{0}, pending_count{0};
  mutable std::mutex loads_mutex;
  FabricModel::LinkLoads loads;   // summed over completed collectives

  void log(const std::string& line) {
    if (options.log) std::fprintf(stderr, "cardsim fabricd: %s\n", line.c_str());
  }
  void accept();
  void onMessage(Session& s, const rpc::ToServer& m);
  void onHello(Session& s, const rpc::Hello& h);
  void onArrive(Session& s, const rpc::Arrive& a);
  void onPark(Session& s, bool parked);
  void onClosed(Session& s);
  void maybeSettle(const std::string& job_name);
  void settle(Job& job);
  // Whether no rank of `job` can report anything new before hearing back; else, in `wait`,
  // how long until the ranks busy elsewhere count as away.
  bool quiescent(const Job& job, std::chrono::steady_clock::duration* wait) const;
  void answer(Job& job, const std::string& key, uint64_t end_ps, const FabricModel::Timed& alone);
  void answerPointToPoint(Job& job, const std::string& key);
  void addLoads(const FabricModel::LinkLoads& used);
  void forget(Job& job, Pending& p);
  void failPending(Job& job, const std::string& key, const std::string& why);
  void startStopping();
};

struct Session : std::enable_shared_from_this<Session> {
  Session(FabricServer::Impl& i, tcp::socket s) : impl(i), socket(std::move(s)) {
    boost::system::error_code ec;
    auto ep = socket.remote_endpoint(ec);
    peer = ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  FabricServer::Impl& impl;
  tcp::socket socket;
  std::string peer;
  unsigned char header[4] = {};
  std::string body;
  std::deque<std::string> out;
  bool writing = false, closing = false, closed = false;
  bool hello = false;
  std::string job;
  int rank = -1;

  std::string who() const {
    return hello ? "rank " + std::to_string(rank) + " of job " + job + " (" + peer + ")" : "client " + peer;
  }

  void readHeader() {
    auto self = shared_from_this();
    asio::async_read(socket, asio::buffer(header, 4), [self](boost::system::error_code ec, size_t) {
      if (ec) return self->closeNow();
      const uint32_t n = wire::frameLength(self->header);
      if (std::string why = wire::frameLengthError(n); !why.empty()) return self->fail(why);
      self->readBody(n);
    });
  }

  void readBody(uint32_t n) {
    body.resize(n);
    auto self = shared_from_this();
    asio::async_read(socket, asio::buffer(body), [self](boost::system::error_code ec, size_t) {
      if (ec) return self->closeNow();
      rpc::ToServer m;
      if (std::string why = wire::parseToServer(self->body, &m); !why.empty()) return self->fail(why);
      self->impl.onMessage(*self, m);
      if (!self->closing && !self->closed) self->readHeader();
    });
  }

  void send(const rpc::ToClient& m) {
    if (closed) return;
    out.push_back(wire::frame(m.SerializeAsString()));
    if (!writing) writeNext();
  }

  void writeNext() {
    if (out.empty()) {
      writing = false;
      if (closing) closeNow();
      return;
    }
    writing = true;
    auto self = shared_from_this();
    asio::async_write(socket, asio::buffer(out.front()), [self](boost::system::error_code ec, size_t) {
      self->out.pop_front();
      if (ec) return self->closeNow();
      self->writeNext();
    });
  }

  // Tells the client what was wrong with the connection, then closes it.
  void fail(const std::string& why) {
    impl.log(who() + ": " + why);
    rpc::ToClient m;
    m.mutable_error()->set_message("fabric server: " + why);
    send(m);
    closeAfterWrites();
  }

  void closeAfterWrites() {
    closing = true;
    if (!writing) closeNow();
  }

  void closeNow() {
    if (closed) return;
    closed = true;
    boost::system::error_code ec;
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
    impl.onClosed(*this);
  }
};

void FabricServer::Impl::accept() {
  acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (stopping || !acceptor.is_open()) return;
    if (!ec) {
      socket.set_option(tcp::no_delay(true), ec);
      auto s = std::make_shared<Session>(*this, std::move(socket));
      sessions.insert(s);
      accepted.fetch_add(1);
      open.fetch_add(1);
      log("connection from " + s->peer);
      s->readHeader();
    }
    accept();
  });
}

void FabricServer::Impl::onMessage(Session& s, const rpc::ToServer& m) {
  if (m.has_hello()) return onHello(s, m.hello());
  if (!s.hello) return s.fail("the first message must be Hello");
  if (m.has_park()) return onPark(s, m.park().parked());
  onArrive(s, m.arrive());
}

void FabricServer::Impl::onHello(Session& s, const rpc::Hello& h) {
  if (s.hello) return s.fail("Hello sent twice");
  if (h.protocol_version() != wire::kProtocolVersion)
    return s.fail("the client speaks fabric protocol version " + std::to_string(h.protocol_version()) +
                  ", this server version " + std::to_string(wire::kProtocolVersion) +
                  " (use the same cardsim build for the job and the server)");
  if (!options.preset.empty() && h.preset() != options.preset)
    return s.fail("rank " + std::to_string(h.rank()) + " uses preset '" + h.preset() +
                  "' but this fabric server models preset '" + options.preset + "'");
  if (!h.fabric().empty()) {
    const std::string diff = fabric::firstDifference(h.fabric(), signature);
    if (!diff.empty())
      return s.fail("rank " + std::to_string(h.rank()) + " and this fabric server model different fabrics (" + diff +
                    ", the rank's then the server's): start the server with the ranks' --set overrides");
  }
  if (h.world_size() == 0 || h.rank() >= h.world_size())
    return s.fail("rank " + std::to_string(h.rank()) + " is outside a world of " + std::to_string(h.world_size()));
  const int rank = static_cast<int>(h.rank());
  auto key = std::make_pair(h.job(), rank);
  if (auto it = by_rank.find(key); it != by_rank.end() && !it->second.expired())
    return s.fail("rank " + std::to_string(rank) + " of job " + h.job() + " is already connected");
  s.hello = true;
  s.job = h.job();
  s.rank = rank;
  by_rank[key] = s.shared_from_this();
  Job& job = jobs[s.job];
  job.gone.erase(rank);
  ++job.sessions;
  job.world = std::max(job.world, h.world_size());
  job.connected.insert(rank);
  job.refresh(rank);
  log(s.who() + " joined");
  rpc::ToClient w;
  w.mutable_welcome()->set_protocol_version(wire::kProtocolVersion);
  w.mutable_welcome()->set_preset(options.preset);
  s.send(w);
}

void FabricServer::Impl::onArrive(Session& s, const rpc::Arrive& a) {
  auto error = [&](const std::string& why) {
    rpc::ToClient m;
    m.mutable_error()->set_id(a.id());
    m.mutable_error()->set_message(why);
    s.send(m);
    failed.fetch_add(1);
  };
  std::vector<int> ranks(a.ranks().begin(), a.ranks().end());
  const std::string what = a.op() + " #" + std::to_string(a.seq()) + " of process group " + rankList(ranks);
  if (ranks.empty()) return error(what + ": the group has no ranks");
  if (std::find(ranks.begin(), ranks.end(), s.rank) == ranks.end())
    return error(what + ": rank " + std::to_string(s.rank) + " is not a member of the group");
  Job& job = jobs[s.job];
  for (int r : ranks)
    if (r < 0 || static_cast<uint32_t>(r) >= job.world)   // it would wait for a rank that never comes
      return error(what + ": rank " + std::to_string(r) + " is outside the job's world of " + std::to_string(job.world));
  const std::string key = a.group() + "\n" + std::to_string(a.seq());
  // A rank that left after arriving here (a send, which never waits for its receiver, then
  // the end of its process) still counts: its part is in.
  const auto earlier = job.pending.find(key);
  for (int r : ranks)
    if (auto g = job.gone.find(r); g != job.gone.end() && (earlier == job.pending.end() || !earlier->second.arrived.count(r)))
      return error(what + ": rank " + std::to_string(r) + " " + g->second);
  auto [it, created] = job.pending.try_emplace(key);
  Pending& p = it->second;
  if (created) {
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      job.pending.erase(it);
      return error(what + ": a rank appears twice in the group");
    }
    p.group = a.group();
    p.ranks = std::move(ranks);
    p.seq = a.seq();
    p.op = a.op();
    p.bytes = a.bytes();
    p.root = a.root();
    p.peer = a.peer();
    p.algorithm = a.algorithm();
    pending_count.fetch_add(1);
  }
  if (!created && (p.op != a.op() || (p.bytes != a.bytes() && !unevenOk(p.op)) || p.ranks != ranks ||
                   p.root != a.root() || p.peer != a.peer() || p.algorithm != a.algorithm())) {
    const int first = p.arrived.empty() ? -1 : p.arrived.begin()->first;
    char detail[256];
    std::snprintf(detail, sizeof detail, "rank %d called %s of %.0f bytes (root %u, algorithm '%s') but rank %d %s of %.0f bytes (root %u, algorithm '%s')",
                  s.rank, a.op().c_str(), a.bytes(), a.root(), a.algorithm().c_str(), first, p.op.c_str(), p.bytes, p.root,
                  p.algorithm.c_str());
    error(what + ": the ranks disagree: " + detail);
    return failPending(job, key, "the ranks disagree: " + std::string(detail));
  }
  // Only a side that waits counts down the group's timeout: an eager send waits for nothing.
  if (!a.eager() && a.timeout_ms() > 0 && !p.timer) {
    p.timer = std::make_unique<asio::steady_timer>(io, std::chrono::milliseconds(a.timeout_ms()));
    const std::string job_name = s.job;
    const uint32_t ms = a.timeout_ms();
    p.timer->async_wait([this, job_name, key, ms](boost::system::error_code ec) {
      if (ec) return;   // completed or failed before the deadline
      auto j = jobs.find(job_name);
      if (j == jobs.end()) return;
      auto pit = j->second.pending.find(key);
      if (pit == j->second.pending.end()) return;
      std::vector<int> missing;
      for (int r : pit->second.ranks)
        if (!pit->second.arrived.count(r)) missing.push_back(r);
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.3g", ms / 1000.0);
      failPending(j->second, key, "timed out after " + std::string(secs) + " s (the process group's timeout) waiting for rank(s) " +
                                      rankList(missing) + ", which never started it (hung, or calling collectives in another order?)");
    });
  }
  if (p.arrived.count(s.rank)) return error(what + ": rank " + std::to_string(s.rank) + " reported it twice");
  p.bytes = std::max(p.bytes, a.bytes());   // uneven all_to_all: the largest send bounds it
  p.arrived[s.rank] = Pending::Arrival{s.shared_from_this(), a.id(), a.arrival_ps(), !a.eager()};
  if (a.eager()) {
    p.p2p = true;
  } else {
    ++job.waiting[s.rank];
    job.refresh(s.rank);
  }
  if (p.arrived.size() == p.ranks.size() && p.p2p) {
    // Timed alone and answered at once: its answer depends on the two arrivals only, and
    // the receiver should not wait for a settle of collectives it has no part in.
    for (const auto& [r, arr] : p.arrived) p.start_ps = std::max(p.start_ps, arr.arrival_ps);
    return answerPointToPoint(job, key);
  }
  if (p.arrived.size() == p.ranks.size()) {
    p.ready = true;
    for (const auto& [r, arr] : p.arrived) p.start_ps = std::max(p.start_ps, arr.arrival_ps);
    if (p.timer) p.timer->cancel();   // every member is here: it completes at the next settle
  }
  maybeSettle(s.job);
}

// Ready collectives are answered together once no rank of the job can report anything new
// before hearing back (every rank waits for an answer or has left): then the set answered
// is the program's, not the wall clock's, and collectives of different groups that overlap
// in simulated time share the links. A rank that has been busy elsewhere for `settle_s` of
// wall time (long host work, a point-to-point transfer, or idle) counts as away until it
// reports again: it holds the others once, not at every collective.
bool FabricServer::Impl::quiescent(const Job& job, std::chrono::steady_clock::duration* wait) const {
  using Clock = std::chrono::steady_clock;
  const auto now = Clock::now();
  const auto settle = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.settle_s));
  Clock::duration longest{0};
  // Ranks not yet connected count as away once the job has existed for the settle time.
  if (job.connected.size() + job.gone.size() < job.world) longest = std::max(longest, job.created + settle - now);
  for (const auto& [rank, since] : job.active) longest = std::max(longest, since + settle - now);
  if (longest < Clock::duration::zero()) longest = Clock::duration::zero();
  *wait = longest;
  return longest == Clock::duration::zero();
}

void FabricServer::Impl::onPark(Session& s, bool parked) {
  Job& job = jobs[s.job];
  if (parked) job.parked.insert(s.rank);
  else job.parked.erase(s.rank);
  job.refresh(s.rank);
  if (parked) maybeSettle(s.job);
}

void FabricServer::Impl::maybeSettle(const std::string& job_name) {
  auto jit = jobs.find(job_name);
  if (jit == jobs.end()) return;
  Job& job = jit->second;
  bool any = false;
  for (const auto& [key, p] : job.pending) any = any || p.ready;
  if (!any) {
    if (job.settle_timer) job.settle_timer->cancel();
    return;
  }
  std::chrono::steady_clock::duration wait{};
  if (quiescent(job, &wait)) {
    if (job.settle_timer) job.settle_timer->cancel();
    return settle(job);
  }
  if (job.settle_timer) return;   // already counting
  job.settle_timer = std::make_unique<asio::steady_timer>(io, wait);
  job.settle_timer->async_wait([this, job_name](boost::system::error_code ec) {
    if (ec) return;
    auto j = jobs.find(job_name);
    if (j == jobs.end()) return;
    j->second.settle_timer.reset();
    log("job " + job_name + ": answering while a rank is busy outside the fabric");
    settle(j->second);
  });
}

void FabricServer::Impl::settle(Job& job) {
  if (job.settle_timer) {
    job.settle_timer->cancel();
    job.settle_timer.reset();
  }
  struct Ready {
    std::string key;
    FabricModel::Timed alone;
    FabricModel::Request request;
    uint64_t start_ps = 0;
  };
  std::vector<Ready> ready;
  std::vector<std::string> keys;   // in key order: the same on every rerun
  for (const auto& [key, p] : job.pending)
    if (p.ready) keys.push_back(key);
  for (const std::string& key : keys) {
    Pending& p = job.pending.at(key);
    Ready r;
    r.key = key;
    r.start_ps = p.start_ps;
    FabricModel::LinkLoads used;
    try {
      r.request.op = fabric::parseOp(p.op);
      r.alone = model.time(r.request.op, p.bytes, p.ranks, p.root, p.peer, p.algorithm, &used);
    } catch (const std::exception& e) {
      failPending(job, key, e.what());
      continue;
    }
    r.request.bytes = p.bytes;
    r.request.ranks = p.ranks;
    r.request.root = p.root;
    r.request.peer = p.peer;
    r.request.algorithm = p.algorithm;
    addLoads(used);
    ready.push_back(std::move(r));
  }
  if (ready.empty()) return;
  uint64_t first = std::numeric_limits<uint64_t>::max();
  for (const Ready& r : ready) first = std::min(first, r.start_ps);
  // Collectives answered before that still run when these start: they share the links.
  std::vector<InFlight> still;
  for (InFlight& f : job.in_flight)
    if (f.end_ps > first) still.push_back(std::move(f));
  job.in_flight = std::move(still);
  std::vector<uint64_t> ends;
  for (const Ready& r : ready) ends.push_back(r.start_ps + model::secondsToPs(r.alone.seconds));
  size_t members = 0;
  for (const Ready& r : ready) members += r.request.ranks.size();
  for (const InFlight& f : job.in_flight) members += f.request.ranks.size();
  // Alone unless something overlaps; joint timing is transfer by transfer, so very large
  // sets keep their times alone rather than stall the server.
  if (ready.size() + job.in_flight.size() > 1 && members <= kMaxJointMembers) {
    uint64_t base = first;
    for (const InFlight& f : job.in_flight) base = std::min(base, f.start_ps);
    std::vector<FabricModel::Request> together;
    for (const InFlight& f : job.in_flight) {
      together.push_back(f.request);
      together.back().release_s = static_cast<double>(f.start_ps - base) * 1e-12;
    }
    for (const Ready& r : ready) {
      together.push_back(r.request);
      together.back().release_s = static_cast<double>(r.start_ps - base) * 1e-12;
    }
    try {
      const std::vector<double> secs = model.timeTogether(together);
      for (size_t i = 0; i < ready.size(); ++i) {
        const double s = secs[job.in_flight.size() + i];
        // Sharing only slows; equal within rounding means it shared nothing.
        if (s > ready[i].alone.seconds * (1 + 1e-9)) ends[i] = ready[i].start_ps + model::secondsToPs(s);
      }
    } catch (const std::exception& e) {
      log(std::string("joint timing failed, timing alone: ") + e.what());
    }
  }
  for (size_t i = 0; i < ready.size(); ++i) {
    InFlight f;
    f.request = ready[i].request;
    f.start_ps = ready[i].start_ps;
    f.end_ps = ends[i];
    job.in_flight.push_back(std::move(f));
    answer(job, ready[i].key, ends[i], ready[i].alone);
  }
  if (job.in_flight.size() > kMaxInFlight)
    job.in_flight.erase(job.in_flight.begin(), job.in_flight.end() - kMaxInFlight);
}

void FabricServer::Impl::addLoads(const FabricModel::LinkLoads& used) {
  std::lock_guard<std::mutex> lock(loads_mutex);
  for (const auto& [name, u] : used) {
    FabricModel::LinkUse& sum = loads[name];
    sum.bytes += u.bytes;
    sum.bandwidth_bytes_per_s = u.bandwidth_bytes_per_s;
  }
}

// A point-to-point transfer starts once both sides have posted it and takes the model's
// time alone; only its receiver hears back (the sender went on at its own arrival).
void FabricServer::Impl::answerPointToPoint(Job& job, const std::string& key) {
  Pending& p = job.pending.at(key);
  FabricModel::LinkLoads used;
  FabricModel::Timed alone;
  try {
    alone = model.time(fabric::parseOp(p.op), p.bytes, p.ranks, p.root, p.peer, p.algorithm, &used);
  } catch (const std::exception& e) {
    return failPending(job, key, e.what());
  }
  addLoads(used);
  answer(job, key, p.start_ps + model::secondsToPs(alone.seconds), alone);
}

void FabricServer::Impl::answer(Job& job, const std::string& key, uint64_t end_ps, const FabricModel::Timed& alone) {
  auto it = job.pending.find(key);
  Pending& p = it->second;
  // Counted before answering: a client may read the answer before this function returns
  // (asio writes at once when it can), and the stats must already include it.
  completed.fetch_add(1);
  pending_count.fetch_sub(1);
  for (const auto& [r, a] : p.arrived) {
    auto s = a.session.lock();
    if (!s || !a.answer) continue;
    rpc::ToClient m;
    auto* c = m.mutable_complete();
    c->set_id(a.id);
    c->set_end_ps(end_ps);
    c->set_algorithm(alone.algorithm);
    c->set_alone_s(alone.seconds);
    s->send(m);
  }
  forget(job, p);
  job.pending.erase(it);
}

void FabricServer::Impl::forget(Job& job, Pending& p) {
  for (const auto& [r, a] : p.arrived)
    if (auto w = job.waiting.find(r); a.answer && w != job.waiting.end() && --w->second <= 0) {
      job.waiting.erase(w);
      job.refresh(r);
    }
  if (p.timer) p.timer->cancel();
}

void FabricServer::Impl::failPending(Job& job, const std::string& key, const std::string& why) {
  auto it = job.pending.find(key);
  if (it == job.pending.end()) return;
  Pending& p = it->second;
  const std::string msg = p.what() + ": " + why;
  log(msg);
  failed.fetch_add(1);   // before the errors go out, as in answer()
  pending_count.fetch_sub(1);
  for (const auto& [r, a] : p.arrived) {
    auto s = a.session.lock();
    if (!s) continue;
    rpc::ToClient m;
    m.mutable_error()->set_id(a.id);
    m.mutable_error()->set_message(msg);
    s->send(m);
  }
  forget(job, p);
  job.pending.erase(it);
}

void FabricServer::Impl::onClosed(Session& s) {
  auto self = s.shared_from_this();
  sessions.erase(self);
  open.fetch_sub(1);
  if (!s.hello) return;
  by_rank.erase(std::make_pair(s.job, s.rank));
  auto jit = jobs.find(s.job);
  if (jit == jobs.end()) return;
  Job& job = jit->second;
  log(s.who() + " left");
  job.gone[s.rank] = "left the job (its connection to the fabric server closed: the process exited or was killed)";
  job.parked.erase(s.rank);
  job.connected.erase(s.rank);
  job.refresh(s.rank);
  std::vector<std::string> doomed;
  for (const auto& [key, p] : job.pending)
    if (!p.arrived.count(s.rank) && std::find(p.ranks.begin(), p.ranks.end(), s.rank) != p.ranks.end())
      doomed.push_back(key);
  for (const std::string& key : doomed)
    failPending(job, key, "rank " + std::to_string(s.rank) + " " + job.gone[s.rank] + " before starting it");
  if (--job.sessions <= 0) {
    // The job is over for the server: drop what is left (answers to ranks no one listens for).
    pending_count.fetch_sub(job.pending.size());
    for (auto& [key, p] : job.pending)
      if (p.timer) p.timer->cancel();
    if (job.settle_timer) job.settle_timer->cancel();
    jobs.erase(jit);
    return;
  }
  // A rank gone waits for nothing: what the others wait for may be answerable now.
  maybeSettle(s.job);
}

void FabricServer::Impl::startStopping() {
  stopping = true;
  boost::system::error_code ec;
  acceptor.close(ec);
  for (auto& [name, job] : jobs) {
    for (auto& [key, p] : job.pending)
      if (p.timer) p.timer->cancel();
    if (job.settle_timer) job.settle_timer->cancel();
  }
  const auto all = sessions;   // closing one erases it from `sessions`
  for (const auto& s : all) s->closeAfterWrites();
}

FabricServer::FabricServer(fabric::FabricParams params, Options options)
    : impl_(std::make_shared<Impl>(std::move(params), std::move(options))) {
  const std::string where = impl_->options.bind + ":" + std::to_string(impl_->options.port);
  try {
    tcp::endpoint ep(asio::ip::make_address(impl_->options.bind), impl_->options.port);
    impl_->acceptor.open(ep.protocol());
    impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
    impl_->acceptor.bind(ep);
    impl_->acceptor.listen();
  } catch (const std::exception& e) {
    throw std::runtime_error("fabric server: cannot listen on " + where + ": " + e.what());
  }
  impl_->accept();
}

FabricServer::~FabricServer() {
  if (impl_->running) stop(0.5);
}

uint16_t FabricServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void FabricServer::start() {
  impl_->running = true;
  Impl* impl = impl_.get();
  impl_->thread = std::thread([impl] {
    impl->io.run();
    impl->finished.set_value();
  });
}

void FabricServer::run() {
  impl_->running = true;
  impl_->io.run();
  impl_->finished.set_value();
}

void FabricServer::stop(double drain_s) {
  if (!impl_->running) return;
  impl_->running = false;
  Impl* impl = impl_.get();
  asio::post(impl->io, [impl] { impl->startStopping(); });
  auto done = impl->finished.get_future();
  if (done.wait_for(std::chrono::duration<double>(std::max(0.0, drain_s))) != std::future_status::ready) impl->io.stop();
  if (impl->thread.joinable()) impl->thread.join();
  else done.wait();
}

FabricModel::LinkLoads FabricServer::linkLoads() const {
  std::lock_guard<std::mutex> lock(impl_->loads_mutex);
  return impl_->loads;
}

FabricServer::Stats FabricServer::stats() const {
  Stats s;
  s.collectives_completed = impl_->completed.load();
  s.collectives_failed = impl_->failed.load();
  s.connections_accepted = impl_->accepted.load();
  s.connections_open = impl_->open.load();
  s.collectives_pending = impl_->pending_count.load();
  return s;
}

}  // namespace cardsim::sim
