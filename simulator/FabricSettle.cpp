// The fabric server's settling: which ready collectives are answered when, and timed how
// (alone, or together with those of other groups that overlap them in simulated time).
#include "simulator/FabricServerState.h"

namespace cardsim::sim {

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
    uint64_t launched_ps = 0;
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
    r.launched_ps = p.launched_ps;
    FabricModel::LinkLoads used;
    r.request.ranks = placedDevices(p, &p.note);
    try {
      r.request.op = fabric::parseOp(p.op);
      r.request.pair_bytes = pairBytes(p);
      r.alone = model.time(r.request.op, p.bytes, r.request.ranks, p.root, p.peer, p.algorithm, &used, false,
                           r.request.pair_bytes.empty() ? nullptr : &r.request.pair_bytes);
    } catch (const std::exception& e) {
      failPending(job, key, e.what());
      continue;
    }
    r.request.bytes = p.bytes;
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
      // Collectives answered before that these ones slow down: where each member can still
      // move its end (it waits here, its simulation short of that end), the earlier one ends
      // where the links shared with these put it (a rank's two streams: both collectives
      // slowed, not only the later one). Told before the answers, on the same connections.
      for (size_t i = 0; i < job.in_flight.size(); ++i) {
        InFlight& f = job.in_flight[i];
        const double was = static_cast<double>(f.end_ps - f.start_ps) * 1e-12;
        if (!(secs[i] > was * (1 + 1e-9)) || !revisable(job, f)) continue;
        // (past the old end, itself at least the members' issue: the floor holds)
        f.end_ps = f.start_ps + model::secondsToPs(secs[i]);
        rpc::ToClient m;
        rpc::Revise* rv = m.mutable_revise();
        rv->set_group(f.group);
        rv->set_seq(f.seq);
        rv->set_end_ps(f.end_ps);
        for (const auto& [r, session] : f.members)
          if (auto sp = session.lock()) sp->send(m);
        revised.fetch_add(1);
      }
    } catch (const std::exception& e) {
      log(std::string("joint timing failed, timing alone: ") + e.what());
    }
  }
  for (size_t i = 0; i < ready.size(); ++i) {
    // No member's end comes before the last member is done issuing it (its host's launch
    // overhead, which overlaps the first steps): a collective shorter than that is
    // launch-bound, and ends on every member together.
    ends[i] = std::max(ends[i], ready[i].launched_ps);
    InFlight f;
    f.request = ready[i].request;
    f.start_ps = ready[i].start_ps;
    f.launched_ps = ready[i].launched_ps;
    f.end_ps = ends[i];
    const Pending& p = job.pending.at(ready[i].key);
    f.group = p.group;
    f.seq = p.seq;
    for (const auto& [r, a] : p.arrived) f.members.emplace(r, a.session);
    job.addInFlight(std::move(f));
    answer(job, ready[i].key, ends[i], ready[i].alone);
  }
}

bool FabricServer::Impl::revisable(const Job& job, const InFlight& f) const {
  if (f.members.empty()) return false;
  for (const auto& [r, session] : f.members) {
    if (!job.waiting.count(r) || session.expired()) return false;
    auto s = job.sealed.find(r);
    if (s == job.sealed.end() || s->second >= f.end_ps) return false;
  }
  return true;
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
  const std::vector<int> devices = placedDevices(p, &p.note);
  try {
    alone = model.time(fabric::parseOp(p.op), p.bytes, devices, p.root, p.peer, p.algorithm, &used);
  } catch (const std::exception& e) {
    return failPending(job, key, e.what());
  }
  addLoads(used);
  answer(job, key, std::max(p.launched_ps, p.start_ps + model::secondsToPs(alone.seconds)), alone);
}

void FabricServer::Impl::answer(Job& job, const std::string& key, uint64_t end_ps, const FabricModel::Timed& alone) {
  auto it = job.pending.find(key);
  Pending& p = it->second;
  // Counted before answering: a client may read the answer before this function returns
  // (asio writes at once when it can), and the stats must already include it.
  completed.fetch_add(1);
  pending_count.fetch_sub(1);
  forEachHostLast(p, [&](Session& s, const Pending::Arrival& a) {
    if (!a.answer) return;
    rpc::ToClient m;
    auto* c = m.mutable_complete();
    c->set_id(a.id);
    c->set_end_ps(end_ps);
    c->set_algorithm(alone.algorithm);
    c->set_alone_s(alone.seconds);
    c->set_note(p.note);
    s.send(m);
  });
  forget(job, p);
  job.pending.erase(it);
}

}  // namespace cardsim::sim
