// The fabric server's state, shared by its two halves: FabricServer.cpp (connections,
// hellos, arrivals, faults) and FabricSettle.cpp (when ready collectives are answered and
// how they are timed together). Internal to simulator/; include only from those two (and their tests).
#pragma once

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
#include "simulator/FabricNames.h"
#include "simulator/FabricServer.h"
#include "simulator/FabricWire.h"
#include "simulator/FrameQueue.h"
#include "simulator/proto/fabric.pb.h"

namespace cardsim::sim {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;
// A connection over TCP or a Unix-domain socket: the protocol is the same.
using Socket = asio::generic::stream_protocol::socket;
namespace rpc = cardsim::fabric_rpc;

namespace fabric_server {

inline std::string rankList(const std::vector<int>& ranks) {
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
inline bool unevenOk(const std::string& op) { return op == "all_to_all"; }

// Bounds on joint timing (transfer by transfer): members summed over the collectives timed
// together, and collectives remembered as still running.
inline constexpr size_t kMaxJointMembers = 512;
inline constexpr size_t kMaxInFlight = 64;

}  // namespace fabric_server

using namespace fabric_server;

struct Session;

struct Pending {
  std::string group;
  std::vector<int> ranks;
  uint64_t seq = 0;
  std::string op;
  double bytes = 0;
  uint32_t root = 0, peer = 0;
  std::string algorithm;
  std::string dtype, reduce_op;     // a reduction's, as its first member said (empty: not said)
  struct Arrival {
    std::weak_ptr<Session> session;
    uint64_t id = 0;
    uint64_t arrival_ps = 0;
    bool answer = true;             // false: the eager side of a point-to-point transfer
    int device = -1;                // the fabric device it runs on; negative: its rank's
  };
  std::map<int, Arrival> arrived;   // by global rank
  bool p2p = false;                 // a point-to-point transfer: answered as soon as both are in
  std::unique_ptr<asio::steady_timer> timer;
  bool ready = false;               // every member has arrived; answered at the next settle
  uint64_t start_ps = 0;            // the latest arrival, once ready
  uint64_t launched_ps = 0;         // the latest member's issue: no end before it
  std::string note;                 // for its answer (Complete.note): how its members were placed
  // An uneven all_to_all: each member's sends (by global rank), in group order.
  std::map<int, std::vector<double>> sends;
  // ... and what members that said so expect from each member (their output splits).
  std::map<int, std::vector<double>> recvs;

  std::string what() const {
    return op + " #" + std::to_string(seq) + " of process group " + rankList(ranks) + groupInstanceNote(group);
  }
};

// The fabric devices the members run on, in group order (a member without one on its rank's,
// device r). Two members on one device (ranks that did not choose their cards: the vendor
// libraries refuse such a group) put every member on its rank's device, and `note` says so.
inline std::vector<int> placedDevices(const Pending& p, std::string* note) {
  std::vector<int> out;
  std::map<int, std::vector<int>> ranks_on;   // device -> its ranks
  for (int r : p.ranks) {
    const auto a = p.arrived.find(r);
    const int device = a != p.arrived.end() && a->second.device >= 0 ? a->second.device : r;
    ranks_on[device].push_back(r);
    out.push_back(device);
  }
  for (const auto& [device, ranks] : ranks_on) {
    if (ranks.size() < 2) continue;
    if (note) {
      std::string who;
      for (size_t i = 0; i < ranks.size(); ++i)
        who += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
      *note = "ranks " + who + " all run on device " + std::to_string(device) +
              " (the vendor libraries refuse two ranks on one card): the fabric times every rank of the group on " +
              "its rank's device, rank r on device r; set each rank's device (its local rank, say) for the times " +
              "of the cards it runs on";
    }
    return p.ranks;
  }
  return out;
}

// An uneven all_to_all's sizes (fabric::CollectiveRequest::pair_bytes) from its members'
// sends; empty when every member sends every member the same (the even exchange).
inline std::vector<double> pairBytes(const Pending& p) {
  const size_t n = p.ranks.size();
  if (p.sends.size() != n || n < 2) return {};
  const double first = p.sends.begin()->second.empty() ? 0 : p.sends.begin()->second.front();
  bool even = true;
  for (const auto& [rank, row] : p.sends)
    for (double b : row) even = even && b == first;
  if (even) return {};
  std::vector<double> out;
  out.reserve(n * n);
  for (int r : p.ranks) {
    const std::vector<double>& row = p.sends.at(r);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// Where an all_to_all's members disagree on its splits (a member expecting other than its
// peer said it sends), what they disagree on; empty when they agree (or did not say).
inline std::string splitMismatch(const Pending& p) {
  for (const auto& [to, row] : p.recvs) {
    const size_t at = static_cast<size_t>(std::find(p.ranks.begin(), p.ranks.end(), to) - p.ranks.begin());
    for (size_t i = 0; i < p.ranks.size() && i < row.size(); ++i) {
      const int from = p.ranks[i];   // a member's split to itself too (Gloo aborts on that as well)
      const double sent = p.sends.at(from).at(at);
      if (sent != row[i]) {
        char what[200];
        std::snprintf(what, sizeof what, "the ranks disagree on its splits: rank %d sends rank %d %.0f bytes, but rank %d expects %.0f bytes from rank %d",
                      from, to, sent, to, row[i], from);
        return what;
      }
    }
  }
  return {};
}

// A collective answered whose end may still overlap later ones: they share links with it.
struct InFlight {
  FabricModel::Request request;
  uint64_t start_ps = 0, end_ps = 0;
  uint64_t launched_ps = 0;   // its members' latest issue: a revised end stays after it
  // A collective's group key, sequence number and members (for a Revise); none for traffic
  // and point-to-point transfers, whose ends are not the server's to move.
  std::string group;
  uint64_t seq = 0;
  std::map<int, std::weak_ptr<Session>> members;
};

struct Job {
  std::map<int, std::string> gone;           // rank -> why it left
  std::map<std::string, Pending> pending;    // by group key and sequence number
  // Collectives that failed (members that disagreed, a timeout), by key: a member arriving
  // after gets the same error at once rather than waiting out the timeout for the others,
  // who got theirs already. Bounded: the oldest go first.
  std::map<std::string, std::string> failed;
  std::deque<std::string> failed_order;
  static constexpr std::size_t kFailedRemembered = 4096;
  int sessions = 0;
  uint32_t world = 0;                        // from the ranks' Hello
  std::map<int, int> waiting;                // rank -> its arrivals not answered yet
  std::set<int> parked;                      // ranks waiting outside the server (Park)
  std::map<int, uint64_t> sealed;            // rank -> Arrive.sealed_ps of its waiting arrivals (the latest)
  std::set<int> connected;
  // Connected ranks neither waiting nor parked, and since when: what holds a settle. Kept
  // as ranks change state, so that a collective's cost does not grow with the job's size.
  std::map<int, std::chrono::steady_clock::time_point> active;
  std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();

  // Recomputes whether `rank` is active after a change of its state.
  // Every rank of the world has said Hello (it is connected, or has come and gone): until
  // then a rank still to connect may need what the others left (a posted send).
  bool everyRankCame() const {
    std::size_t came = connected.size();
    for (const auto& [rank, why] : gone) came += connected.count(rank) ? 0 : 1;
    return came >= world;
  }
  void refresh(int rank) {
    const bool busy = connected.count(rank) && !parked.count(rank) && !waiting.count(rank);
    if (!busy) active.erase(rank);
    else if (!active.count(rank)) active.emplace(rank, std::chrono::steady_clock::now());
  }
  std::vector<InFlight> in_flight;
  void addInFlight(InFlight f) {   // bounded: the oldest go first
    in_flight.push_back(std::move(f));
    if (in_flight.size() > kMaxInFlight) in_flight.erase(in_flight.begin(), in_flight.end() - kMaxInFlight);
  }
  std::unique_ptr<asio::steady_timer> settle_timer;
};

struct FabricServer::Impl {
  Impl(fabric::FabricParams params, Options o)
      : acceptor(io), local_acceptor(io), signature(fabric::fabricSignature(params)), model(std::move(params)),
        options(std::move(o)) {}

  asio::io_context io;
  tcp::acceptor acceptor;
  local::acceptor local_acceptor;   // Options::local: ranks on this host, by an abstract name
  std::string local_name;           // that name, without its leading NUL
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

  std::atomic<uint64_t> completed{0}, failed{0}, accepted{0}, open_count{0}, pending_count{0};
  std::atomic<uint64_t> revised{0};   // answers whose end a later settle moved (Revise)
  mutable std::mutex loads_mutex;
  FabricModel::LinkLoads loads;   // summed over completed collectives

  void log(const std::string& line) {
    if (options.log) std::fprintf(stderr, "cardsim fabricd: %s\n", line.c_str());
  }
  void accept();
  void acceptLocal();
  void open(Socket socket, std::string peer, bool same_host);
  void onMessage(Session& s, const rpc::ToServer& m);
  void onHello(Session& s, const rpc::Hello& h);
  void onArrive(Session& s, const rpc::Arrive& a);
  void onPark(Session& s, bool parked);
  void onTraffic(Session& s, const rpc::Traffic& t);
  void onClosed(Session& s);
  void maybeSettle(const std::string& job_name);
  void settle(Job& job);
  // Whether no rank of `job` can report anything new before hearing back; else, in `wait`,
  // how long until the ranks busy elsewhere count as away.
  bool quiescent(const Job& job, std::chrono::steady_clock::duration* wait) const;
  void answer(Job& job, const std::string& key, uint64_t end_ps, const FabricModel::Timed& alone);
  // Whether every member of `f` waits here now with its simulation short of f's end.
  bool revisable(const Job& job, const InFlight& f) const;
  void answerPointToPoint(Job& job, const std::string& key);
  void addLoads(const FabricModel::LinkLoads& used);
  void forget(Job& job, Pending& p);
  void failPending(Job& job, const std::string& key, const std::string& why);
  void startStopping();
};

struct Session : std::enable_shared_from_this<Session> {
  Session(FabricServer::Impl& i, Socket s, std::string peer_name, bool same)
      : impl(i), socket(std::move(s)), peer(std::move(peer_name)), same_host(same) {}

  FabricServer::Impl& impl;
  Socket socket;
  std::string peer;
  bool same_host = false;           // over loopback TCP or the Unix-domain socket
  unsigned char header[4] = {};
  std::string body;
  // Answers; the connection closes once they are written out after closeAfterWrites(), or
  // when one cannot be written.
  FrameQueue out{socket, [this](const boost::system::error_code&) { closeNow(); }};
  bool closed = false;
  bool hello = false;
  std::string job;
  int rank = -1;
  bool in_server_process = false;   // the rank whose process hosts this server (its Hello's pid)

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
      if (!self->out.closing() && !self->closed) self->readHeader();
    });
  }

  void send(const rpc::ToClient& m) {
    if (closed) return;
    out.push(wire::frame(m.SerializeAsString()), shared_from_this());
  }

  // Tells the client what was wrong with the connection, then closes it.
  void fail(const std::string& why) {
    impl.log(who() + ": " + why);
    rpc::ToClient m;
    m.mutable_error()->set_message("fabric server: " + why);
    send(m);
    closeAfterWrites();
  }

  void closeAfterWrites() { out.closeAfterWrites(); }

  void closeNow() {
    if (closed) return;
    closed = true;
    boost::system::error_code ec;
    socket.shutdown(Socket::shutdown_both, ec);
    socket.close(ec);
    impl.onClosed(*this);
  }
};

// Calls `f` for each member of `p` still connected, the rank whose process hosts this server
// last: its answer goes out once the others' are written (asio writes at once when it can),
// so that a host ending its process right after its last collective (os._exit, skipping the
// exit handler that keeps the server up) cannot cut the others' answers short.
// (Several ranks may share the server's process: a test's, or one process driving them.)
template <class F>
void forEachHostLast(const Pending& p, F f) {
  for (const bool host : {false, true})
    for (const auto& [r, a] : p.arrived)
      if (auto s = a.session.lock(); s && s->in_server_process == host) f(*s, a);
}

}  // namespace cardsim::sim
