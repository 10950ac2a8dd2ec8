// The fabric server: connections, hellos, arrivals, parking and faults (the settling of
// ready collectives is FabricSettle.cpp; the shared state FabricServerState.h).
#include "simulator/FabricServerState.h"

#include <unistd.h>

namespace cardsim::sim {

void FabricServer::Impl::accept() {
  acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (stopping || !acceptor.is_open()) return;
    if (!ec) {
      socket.set_option(tcp::no_delay(true), ec);
      boost::system::error_code ep_ec;
      const auto ep = socket.remote_endpoint(ep_ec);
      std::string peer = ep_ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
      open(Socket(std::move(socket)), std::move(peer), !ep_ec && ep.address().is_loopback());
    }
    accept();
  });
}

void FabricServer::Impl::acceptLocal() {
  local_acceptor.async_accept([this](boost::system::error_code ec, local::socket socket) {
    if (stopping || !local_acceptor.is_open()) return;
    if (!ec) open(Socket(std::move(socket)), "unix:@" + local_name, true);
    acceptLocal();
  });
}

void FabricServer::Impl::open(Socket socket, std::string peer, bool same_host) {
  auto s = std::make_shared<Session>(*this, std::move(socket), std::move(peer), same_host);
  sessions.insert(s);
  accepted.fetch_add(1);
  open_count.fetch_add(1);
  log("connection from " + s->peer);
  s->readHeader();
}

void FabricServer::Impl::onMessage(Session& s, const rpc::ToServer& m) {
  if (m.has_hello()) return onHello(s, m.hello());
  if (!s.hello) return s.fail("the first message must be Hello");
  if (m.has_park()) return onPark(s, m.park().parked());
  if (m.has_traffic()) return onTraffic(s, m.traffic());
  if (m.has_ask_gone()) {
    const Job& job = jobs[s.job];
    rpc::ToClient reply;
    rpc::Gone* g = reply.mutable_gone();
    g->set_id(m.ask_gone().id());
    for (int r : m.ask_gone().ranks())
      if (auto it = job.gone.find(r); it != job.gone.end()) {
        g->add_ranks(r);
        g->add_why(it->second);
      }
    return s.send(reply);
  }
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
  s.in_server_process = s.same_host && h.pid() == static_cast<uint32_t>(::getpid());
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
  const std::string what =
      a.op() + " #" + std::to_string(a.seq()) + " of process group " + rankList(ranks) + groupInstanceNote(a.group());
  if (ranks.empty()) return error(what + ": the group has no ranks");
  // Simulated times end by 2^63 ps (106 days), as traces' do: an end computed past that
  // would wrap around to before the arrival.
  constexpr uint64_t kLatestPs = uint64_t{1} << 63;
  if (a.arrival_ps() >= kLatestPs || a.launched_ps() >= kLatestPs)
    return error(what + ": arrival at " + std::to_string(a.arrival_ps()) + " ps is past the simulation's end (2^63 ps)");
  if (std::find(ranks.begin(), ranks.end(), s.rank) == ranks.end())
    return error(what + ": rank " + std::to_string(s.rank) + " is not a member of the group");
  if (const uint32_t per = model.params().devices_per_node;
      a.has_device() && (per == 0 || a.device() / per != static_cast<uint32_t>(s.rank) / per))
    return error(what + ": rank " + std::to_string(s.rank) + " runs it on fabric device " + std::to_string(a.device()) +
                 ", not on its node (node " + std::to_string(per ? s.rank / per : 0) + ": devices " +
                 std::to_string(per ? s.rank / per * per : 0) + ".." + std::to_string(per ? s.rank / per * per + per - 1 : 0) + ")");
  for (const int given : {a.send_bytes_size(), a.recv_bytes_size()})
    if (given > 0 && (a.op() != "all_to_all" || static_cast<size_t>(given) != ranks.size()))
      return error(what + ": rank " + std::to_string(s.rank) + " sent " + std::to_string(given) +
                   " per-member sizes; only an all_to_all has them, one per member (" + std::to_string(ranks.size()) + ")");
  Job& job = jobs[s.job];
  for (int r : ranks)
    if (r < 0 || static_cast<uint32_t>(r) >= job.world)   // it would wait for a rank that never comes
      return error(what + ": rank " + std::to_string(r) + " is outside the job's world of " + std::to_string(job.world));
  const std::string key = a.group() + "\n" + std::to_string(a.seq());
  if (auto f = job.failed.find(key); f != job.failed.end() && !job.pending.count(key)) return error(f->second);
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
    p.dtype = a.dtype();
    p.reduce_op = a.reduce_op();
    pending_count.fetch_add(1);
  }
  // Said by both (a client before protocol 9, or a caller that does not know, says nothing).
  const auto differs = [](const std::string& x, const std::string& y) { return !x.empty() && !y.empty() && x != y; };
  if (!created && (p.op != a.op() || (p.bytes != a.bytes() && !unevenOk(p.op)) || p.ranks != ranks ||
                   p.root != a.root() || p.peer != a.peer() || p.algorithm != a.algorithm() ||
                   differs(p.dtype, a.dtype()) || differs(p.reduce_op, a.reduce_op()))) {
    const int first = p.arrived.empty() ? -1 : p.arrived.begin()->first;
    // A reduction's type and operation are named where the members disagree on them.
    const auto of = [&](const std::string& dtype, const std::string& rop, uint32_t peer) {
      std::string s;
      if (differs(p.dtype, a.dtype())) s += dtype + ", ";
      if (differs(p.reduce_op, a.reduce_op())) s += rop + ", ";
      if (p.peer != a.peer()) s += "peer " + std::to_string(peer) + ", ";
      return s;
    };
    char detail[384];
    std::snprintf(detail, sizeof detail, "rank %d called %s of %.0f bytes (%sroot %u, algorithm '%s') but rank %d %s of %.0f bytes (%sroot %u, algorithm '%s')",
                  s.rank, a.op().c_str(), a.bytes(), of(a.dtype(), a.reduce_op(), a.peer()).c_str(), a.root(), a.algorithm().c_str(), first,
                  p.op.c_str(), p.bytes, of(p.dtype, p.reduce_op, p.peer).c_str(), p.root, p.algorithm.c_str());
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
  if (p.op == "all_to_all") {
    std::vector<double>& row = p.sends[s.rank];
    if (a.send_bytes_size() > 0) row.assign(a.send_bytes().begin(), a.send_bytes().end());
    else row.assign(p.ranks.size(), a.bytes() / static_cast<double>(p.ranks.size()));
    // A member that gave no rows runs the even exchange of its buffer: it expects as much
    // from each member as it sends each (so a peer's uneven sends to it are checked too).
    if (a.recv_bytes_size() > 0) p.recvs[s.rank].assign(a.recv_bytes().begin(), a.recv_bytes().end());
    else if (a.send_bytes_size() == 0) p.recvs[s.rank] = row;
  }
  p.bytes = std::max(p.bytes, a.bytes());   // uneven all_to_all: the largest send bounds it
  p.arrived[s.rank] = Pending::Arrival{s.shared_from_this(), a.id(), a.arrival_ps(), !a.eager(),
                                       a.has_device() ? static_cast<int>(std::min<uint32_t>(a.device(), 1u << 30)) : -1};
  p.launched_ps = std::max(p.launched_ps, a.launched_ps());
  if (a.eager()) {
    p.p2p = true;
  } else {
    ++job.waiting[s.rank];
    uint64_t& sealed = job.sealed[s.rank];
    sealed = std::max(sealed, a.sealed_ps());
    job.refresh(s.rank);
  }
  if (!a.refused().empty())   // its other members would wait for transfers it never starts
    return failPending(job, key, "the ranks disagree: rank " + std::to_string(s.rank) + " cannot run it (" +
                                     a.refused().substr(0, 300) + ")");
  if (p.arrived.size() == p.ranks.size() && p.p2p) {
    // Timed alone and answered at once: its answer depends on the two arrivals only, and
    // the receiver should not wait for a settle of collectives it has no part in.
    for (const auto& [r, arr] : p.arrived) p.start_ps = std::max(p.start_ps, arr.arrival_ps);
    return answerPointToPoint(job, key);
  }
  if (p.arrived.size() == p.ranks.size()) {
    if (const std::string why = splitMismatch(p); !why.empty()) return failPending(job, key, why);
    p.ready = true;
    for (const auto& [r, arr] : p.arrived) p.start_ps = std::max(p.start_ps, arr.arrival_ps);
    if (p.timer) p.timer->cancel();   // every member is here: it completes at the next settle
  }
  maybeSettle(s.job);
}

void FabricServer::Impl::onPark(Session& s, bool parked) {
  Job& job = jobs[s.job];
  if (parked) job.parked.insert(s.rank);
  else job.parked.erase(s.rank);
  job.refresh(s.rank);
  if (parked) maybeSettle(s.job);
}

// A peer copy of the rank's process: in flight from its start for the copy's time alone
// (the server does not hear when it really ends), so that the collectives timed after it
// share the links it crosses with it (FabricSettle.cpp). Bad values are the client's bug:
// the connection is refused as for any malformed message.
void FabricServer::Impl::onTraffic(Session& s, const rpc::Traffic& t) {
  if (t.ranks_size() != 2 || t.ranks(0) < 0 || t.ranks(1) < 0 || t.ranks(0) == t.ranks(1) || !(t.bytes() > 0))
    return s.fail("Traffic needs two different non-negative ranks and a positive size");
  Job& job = jobs[s.job];
  InFlight f;
  f.request.op = fabric::CollectiveOp::SendRecv;
  f.request.bytes = t.bytes();
  f.request.ranks = {t.ranks(0), t.ranks(1)};
  f.request.root = 0;
  f.request.peer = 1;
  FabricModel::LinkLoads used;
  try {
    (void)model.time(f.request.op, f.request.bytes, f.request.ranks, 0, 1, "", &used);   // its links' bytes
    // In flight for the copy's own time (the link's copy rate, no collective's latency).
    f.start_ps = t.start_ps();
    f.end_ps = t.start_ps() + model::secondsToPs(model.copySeconds(t.ranks(0), t.ranks(1), t.bytes()));
  } catch (const std::exception& e) {
    return s.fail(std::string("Traffic: ") + e.what());
  }
  addLoads(used);
  job.addInFlight(std::move(f));
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
  if (job.failed.emplace(key, msg).second) {
    job.failed_order.push_back(key);
    if (job.failed_order.size() > Job::kFailedRemembered) {
      job.failed.erase(job.failed_order.front());
      job.failed_order.pop_front();
    }
  }
  failed.fetch_add(1);   // before the errors go out, as in answer()
  pending_count.fetch_sub(1);
  forEachHostLast(p, [&](Session& s, const Pending::Arrival& a) {
    rpc::ToClient m;
    m.mutable_error()->set_id(a.id);
    m.mutable_error()->set_message(msg);
    s.send(m);
  });
  forget(job, p);
  job.pending.erase(it);
}

void FabricServer::Impl::onClosed(Session& s) {
  auto self = s.shared_from_this();
  sessions.erase(self);
  open_count.fetch_sub(1);
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
  // The job is over for the server once every rank of its world has come and gone (a send
  // posted by a rank that exited before its receiver connected is still needed).
  if (--job.sessions <= 0 && job.everyRankCame()) {
    // Drop what is left (answers to ranks no one listens for).
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
  local_acceptor.close(ec);
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
  if (impl_->options.local) {
    // An abstract name (Linux): no file to clean up, and only this host's processes reach it.
    static std::atomic<unsigned> serial{0};
    impl_->local_name = "cardsim-fabric-" + std::to_string(::getpid()) + "-" + std::to_string(serial++) + "-" +
                        std::to_string(impl_->acceptor.local_endpoint().port());
    try {
      const local::endpoint ep(std::string(1, '\0') + impl_->local_name);
      impl_->local_acceptor.open(ep.protocol());
      impl_->local_acceptor.bind(ep);
      impl_->local_acceptor.listen();
      impl_->acceptLocal();
    } catch (const std::exception& e) {
      // Where abstract Unix-domain names are not available, TCP serves alone (localAddress()
      // is then "", and the ranks connect by host:port).
      impl_->log("no Unix-domain socket (" + std::string(e.what()) + "); serving over TCP only");
      boost::system::error_code ec;
      impl_->local_acceptor.close(ec);
      impl_->local_name.clear();
    }
  }
}

FabricServer::~FabricServer() {
  if (impl_->running) stop(0.5);
}

uint16_t FabricServer::port() const { return impl_->acceptor.local_endpoint().port(); }

std::string FabricServer::localAddress() const {
  return impl_->local_name.empty() ? std::string() : "unix:@" + impl_->local_name;
}

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
  s.connections_open = impl_->open_count.load();
  s.collectives_pending = impl_->pending_count.load();
  s.collectives_revised = impl_->revised.load();
  return s;
}

}  // namespace cardsim::sim
