// Running the SystemC model for the Simulator (SimulatorImpl.h): host threads' commands and
// requests come in through the intake; a driver (the calling thread, or the simulation's own
// thread under CARDSIM_SIM_DRIVER=thread) runs the batches and answers the requests.
#include <algorithm>
#include <exception>

#include "simulator/SimulatorImpl.h"

namespace cardsim::sim {

using model::Card;
using model::index;

namespace {

// Why the simulation is unusable after an exception out of sc_start; `overflow` if it was
// model::SimTimeOverflow (the configuration's fault, not a model bug).
std::string failedInside(const std::exception& e, std::atomic<bool>* overflow) {
  // SystemC reports a process's exception as its own (E549), the type lost: the overflow's
  // words are looked for. From here on the type travels (SimulationOverflow).
  const std::string what = e.what();
  const std::size_t at = what.find("simulated time overflow: ");
  if (at != std::string::npos) {
    overflow->store(true);
    const std::size_t end = what.find('\n', at);
    return what.substr(at, end == std::string::npos ? std::string::npos : end - at) +
           " SystemC cannot resume a simulation after that: the emulated cards of this process are unusable";
  }
  return std::string("cardsim: the device model failed inside SystemC (") + e.what() +
         "); SystemC cannot resume a simulation after that, so the emulated cards of this "
         "process are unusable: restart the process (and please report the error)";
}

}  // namespace

void Simulator::Impl::buildModel() {
  try {
    for (uint32_t d = 0; d < devices; ++d)
      cards.push_back(std::make_unique<Card>(("device_" + std::to_string(d)).c_str(), DeviceId{d},
                                             params, *this, cards));
    if (fabric_params && devices > 1) {
      fabric::FabricParams p = *fabric_params;
      p.nodes = fabric::nodesToBuild(p, devices);
      fabric = std::make_unique<model::FabricLinks>("fabric", fabric::buildTopology(p));
      for (auto& c : cards) c->setFabric(fabric.get());
    }
    sc_core::sc_start(sc_core::SC_ZERO_TIME);  // elaborate and start every process
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("cardsim: could not build the device model: ") + e.what());
  }
}

void Simulator::Impl::threadMain(std::promise<void>* ready) {
  try {
    buildModel();
  } catch (...) {
    ready->set_exception(std::current_exception());
    return;
  }
  ready->set_value();

  std::vector<Item> batch;
  TimePs deferred = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      while (intake.empty() && !stop) {
        sleeping = true;
        wake.wait(lock);
      }
      sleeping = false;
      if (stop && intake.empty()) break;
      batch.swap(intake);
      deferred = std::exchange(deferred_horizon, 0);
    }
    simulate(batch, deferred);
  }
}

void Simulator::Impl::driveUntilIdle() {
  std::vector<Item>& batch = drive_batch;   // one driver at a time; its capacity goes back to the intake
  for (;;) {
    TimePs deferred = 0;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (intake.empty()) {
        driving = false;
        return;
      }
      batch.swap(intake);
      deferred = std::exchange(deferred_horizon, 0);
    }
    // After the batch is taken: a collective is pending before its command is submitted, so
    // every unanswered one in the batch (or queued earlier) is answered before it runs. May
    // block on the fabric server; no lock is held here.
    if (before_run) before_run();
    simulate(batch, deferred);
  }
}

void Simulator::Impl::simulate(std::vector<Item>& batch, TimePs deferred) {
  std::vector<Request*>& requests = batch_requests;   // one simulate at a time; kept allocated
  requests.clear();
  if (deferred > simNowPs() && fatal.empty()) {
    try {
      runTo(deferred, deferred);   // a wait answered at once asked for it
    } catch (const std::exception& e) {
      fatal = failedInside(e, &fatal_overflow);
    }
  }
  // Commands: run every event before their ready times, not at them, so that a later
  // command of the same host thread ready at the same time is not pushed 1 ps into the
  // future (which would make times depend on where the intake was cut into batches).
  // Requests: run every event at or before their time (a query sees what completed then;
  // the caller's next call lands later by its overhead).
  TimePs horizon = simNowPs();
  TimePs needed = 0;   // events before it are asked for by requests (counters ask for none)
  for (Item& it : batch) {
    if (it.request) {
      requests.push_back(it.request);
      horizon = std::max(horizon, it.request->at_ps + 1);
      if (it.request->kind != Request::Kind::Counters) needed = std::max(needed, it.request->at_ps + 1);
      continue;
    }
    // Only a command from another host thread can be behind the simulation: start it now.
    it.cmd.ready_ps = std::max(it.cmd.ready_ps, simNowPs());
    horizon = std::max(horizon, it.cmd.ready_ps);
    cards[index(it.device)]->queue(it.queue).push(std::move(it.cmd));
  }
  batch.clear();
  try {
    // A lone wait (a synchronize, a synchronous copy) is registered first and the simulation
    // runs until it is answered, then on to the horizon if it is not there yet: one run of
    // the scheduler where the wait ends past the horizon (the usual case) instead of two. Its
    // answer is the same, max(its time, the last completion), and the simulation ends where
    // it did (SystemC resumes a paused run where it stopped).
    const bool lone_wait = requests.size() == 1 && requests[0]->kind == Request::Kind::Wait;
    if (!lone_wait) runTo(horizon, needed);
    for (Request* r : requests) handle(r);
    requests.clear();
    while (!waits.empty()) {
      // Until onComplete() pauses it (every waiter answered), or to a held collective end:
      // the waits ask for what is behind it, so it is sealed and passed.
      const TimePs held = ends.first();
      if (held == CollectiveEndLedger::kNone) {
        sc_core::sc_start();
      } else {
        if (held > simNowPs()) sc_core::sc_start(sc_core::sc_time::from_value(held - simNowPs()));
        if (!waits.empty() && simNowPs() >= held) {
          ends.seal(held);
          continue;
        }
      }
      if (!waits.empty() && !sc_core::sc_pending_activity()) {
        // Nothing left to run, yet some commands never completed: a model bug. Only the
        // waits on them fail; the simulation itself is consistent and goes on.
        for (PendingWait& w : waits) {
          std::string what = "cardsim: the device model went idle before completing";
          for (const QueuePoint& p : w.remaining)
            what += " command " + std::to_string(p.seq) + " of device " + std::to_string(index(p.device)) +
                    " queue " + std::to_string(index(p.queue));
          what += " (a model bug: please report it); this wait failed, the runtime goes on";
          w.request->reply.set_value(Reply{false, 0, what, {}});
        }
        waits.clear();
      }
    }
    runTo(horizon, needed);   // a lone wait's run may have stopped short of it (a no-op otherwise)
  } catch (const std::exception& e) {
    // An exception out of sc_start leaves SystemC's scheduler mid-delta; it cannot resume
    // (one simulation context per process, no restart), so later calls fail with this.
    fatal = failedInside(e, &fatal_overflow);
  }
  if (!fatal.empty()) {
    for (Request* r : requests) r->reply.set_value(Reply{false, 0, fatal, {}});
    requests.clear();
    for (PendingWait& w : waits) w.request->reply.set_value(Reply{false, 0, fatal, {}});
    waits.clear();
  }
}

void Simulator::Impl::runTo(TimePs horizon, TimePs needed) {
  // Runs every event before `horizon` (SystemC stops at the end time without running it).
  for (;;) {
    const TimePs now = simNowPs();
    const TimePs held = ends.first();
    const TimePs to = std::min(horizon, held);
    if (to > now) sc_core::sc_start(sc_core::sc_time::from_value(to - now));
    if (held >= horizon || held >= needed) return;   // nothing held before the horizon, or not asked past it
    ends.seal(held);
  }
}

void Simulator::Impl::handle(Request* r) {
  if (!fatal.empty()) {
    r->reply.set_value(Reply{false, 0, fatal, {}});
    return;
  }
  switch (r->kind) {
    case Request::Kind::Counters: {
      Reply rep;
      Card& c = *cards[index(r->device)];
      rep.counters.cluster_busy_seconds = c.clusters().busyClusterSeconds();
      rep.counters.memory_bytes = c.memory().stats().bytesMoved();
      rep.counters.memory_busy_seconds = c.memory().stats().busySeconds();
      rep.counters.host_link_bytes_to_device = c.hostLink().statsToDevice().bytesMoved();
      rep.counters.host_link_bytes_to_host = c.hostLink().statsToHost().bytesMoved();
      for (size_t q = 0; q < c.queueCount(); ++q)
        rep.counters.commands_completed += c.queue(QueueId{static_cast<uint32_t>(q)}).completed();
      rep.done = true;
      rep.time_ps = simNowPs();
      r->reply.set_value(rep);
      return;
    }
    case Request::Kind::Query: {
      bool done = true;
      for (const QueuePoint& p : r->points)
        if (completed[slot(p.device, p.queue)] < p.seq) done = false;
      r->reply.set_value(Reply{done, r->at_ps, {}, {}});
      return;
    }
    case Request::Kind::Peek:
    case Request::Kind::Wait: {
      PendingWait w{r, {}, r->at_ps};
      if (r->kind == Request::Kind::Peek)
        for (const QueuePoint& p : r->points)
          if (completed[slot(p.device, p.queue)] >= p.seq) w.latest_ps = std::max(w.latest_ps, last_end[slot(p.device, p.queue)]);
      w.remaining = std::move(r->points);   // the request's own list, less what has completed
      w.remaining.erase(std::remove_if(w.remaining.begin(), w.remaining.end(),
                                       [&](const QueuePoint& p) { return completed[slot(p.device, p.queue)] >= p.seq; }),
                        w.remaining.end());
      if (w.remaining.empty()) {
        // A command queued now starts no earlier than where the simulation already is.
        const TimePs t = r->kind == Request::Kind::Peek ? std::max(w.latest_ps, simNowPs()) : r->at_ps;
        r->reply.set_value(Reply{true, t, {}, {}});
      } else {
        waits.push_back(std::move(w));
      }
      return;
    }
  }
}

void Simulator::Impl::onComplete(DeviceId device, QueueId queue, const Command& cmd, TimePs start,
                                 TimePs end) {
  completed[slot(device, queue)] = cmd.seq;
  last_end[slot(device, queue)] = end;
  completed_total.fetch_add(1, std::memory_order_relaxed);
  if (recording.load(std::memory_order_relaxed)) {
    Activity a;
    a.device = device;
    a.queue = queue;
    a.stream_tag = cmd.stream_tag;
    a.correlation = cmd.correlation;
    a.kind = cmd.kind;
    a.copy_kind = cmd.copy_kind;
    a.name_id = cmd.name_id;
    a.ready_ps = cmd.submitted_ps ? cmd.submitted_ps : cmd.ready_ps;
    a.start_ps = start;
    a.end_ps = end;
    a.flops = cmd.kind == CommandKind::Kernel ? cmd.kernel.flops : 0;
    a.bytes = cmd.kind == CommandKind::Kernel
                  ? static_cast<uint64_t>(cmd.kernel.bytes_read + cmd.kernel.bytes_written)
                  : cmd.bytes;
    std::lock_guard<std::mutex> lock(activity_mutex);
    activities.push_back(a);
  }
  if (waits.empty()) return;
  for (auto it = waits.begin(); it != waits.end();) {
    auto& rem = it->remaining;
    rem.erase(std::remove_if(rem.begin(), rem.end(),
                             [&](const QueuePoint& p) {
                               if (p.device != device || p.queue != queue || p.seq > cmd.seq)
                                 return false;
                               it->latest_ps = std::max(it->latest_ps, end);
                               return true;
                             }),
              rem.end());
    if (rem.empty()) {
      it->request->reply.set_value(Reply{true, it->latest_ps, {}, {}});
      it = waits.erase(it);
    } else {
      ++it;
    }
  }
  if (waits.empty()) sc_core::sc_pause();
}

// Commands gathered before the simulation runs without a request.
constexpr size_t kIntakeBatch = 1024;

uint64_t Simulator::Impl::push(Item item, bool* answered) {
  bool notify = false;
  bool drive = false;
  uint64_t seq = 0;
  {
    // seq is assigned under the intake lock so queue order and seq order agree.
    std::lock_guard<std::mutex> lock(mutex);
    if (answered && item.request && answersAtOnce(*item.request)) {
      *answered = true;
      return 0;
    }
    if (!item.request) item.cmd.seq = seq = ++submitted[slot(item.device, item.queue)];
    const bool is_request = item.request != nullptr;
    intake.push_back(std::move(item));
    // Commands alone need no simulation until someone asks for a time (a request) or the
    // intake grows: waking the thread per command would cost two context switches each.
    const bool wanted = is_request || intake.size() >= kIntakeBatch;
    if (caller_driven) {
      drive = wanted && !driving;
      if (drive) driving = true;
    } else {
      notify = sleeping && wanted;
      if (notify) sleeping = false;
    }
  }
  if (notify) wake.notify_one();
  if (drive) driveUntilIdle();
  return seq;
}

bool Simulator::Impl::answersAtOnce(const Request& r) {
  if (r.kind != Request::Kind::Wait) return false;
  if (caller_driven ? driving : !sleeping) return false;   // first: only then is `fatal` settled too
  if (!intake.empty() || !fatal.empty()) return false;
  for (const QueuePoint& p : r.points)
    if (completed[slot(p.device, p.queue)] < p.seq) return false;
  deferred_horizon = std::max(deferred_horizon, r.at_ps + 1);   // where the wait's run would have ended
  return true;
}

Reply Simulator::Impl::ask(Request& r) {
  Item item;
  item.request = &r;
  bool answered = false;
  push(std::move(item), &answered);
  if (answered) return Reply{true, r.at_ps, {}, {}};
  Reply rep = r.reply.get();
  if (!rep.error.empty()) {
    if (fatal_overflow.load()) throw SimulationOverflow("cardsim: " + rep.error);
    throw std::runtime_error("cardsim: " + rep.error);
  }
  return rep;
}

void Simulator::Impl::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
  }
  wake.notify_one();
  if (thread.joinable()) thread.join();
}


}  // namespace cardsim::sim
