#include "simulator/Simulator.h"

#include <unistd.h>

#include <systemc>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "device_models/Card.h"
#include "device_models/FabricLinks.h"
#include "simulator/FabricConfig.h"
#include "simulator/HostClock.h"

namespace cardsim::sim {

using model::Card;
using model::index;

namespace {

std::mutex g_start_mutex;
Simulator* g_simulator = nullptr;

TimePs simNowPs() { return sc_core::sc_time_stamp().value(); }

// Why the simulation is unusable after an exception out of sc_start.
std::string failedInside(const std::exception& e) {
  return std::string("cardsim: the device model failed inside SystemC (") + e.what() +
         "); SystemC cannot resume a simulation after that, so the emulated cards of this "
         "process are unusable: restart the process (and please report the error)";
}

bool sameOptions(const SimOptions& a, const SimOptions& b) {
  return a.preset == b.preset && a.devices == b.devices && a.overrides == b.overrides &&
         a.overrides_file == b.overrides_file;
}

}  // namespace

struct Reply {
  bool done = false;
  TimePs time_ps = 0;
  std::string error;
  DeviceCounters counters;
};

// A request's answer, handed from the thread that runs the simulation to the one that asked
// (std::promise costs a futex system call per answer even when nobody waits: call_once).
class ReplySlot {
 public:
  void set_value(Reply r) {
    // Notified under the lock: the asker may destroy the slot as soon as it sees `ready_`,
    // and a notify after the unlock would then touch a destroyed condition variable (a race
    // ThreadSanitizer found between the status board's sampling thread and a synchronize).
    std::lock_guard<std::mutex> lock(mutex_);
    value_ = std::move(r);
    ready_ = true;
    cv_.notify_one();
  }
  Reply get() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return ready_; });
    return std::move(value_);
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool ready_ = false;
  Reply value_;
};

struct Request {
  enum class Kind { Wait, Query, Counters, Peek } kind = Kind::Wait;
  std::vector<QueuePoint> points;
  TimePs at_ps = 0;
  DeviceId device{};
  ReplySlot reply;
};

struct Item {
  DeviceId device{};
  QueueId queue{};
  Command cmd;
  Request* request = nullptr;
};

struct PendingWait {
  Request* request;
  std::vector<QueuePoint> remaining;
  TimePs latest_ps;
};

struct Simulator::Impl : model::ICompletionSink {
  SimOptions options;
  DeviceParams params;
  uint32_t devices = 0;
  uint32_t queues_per_device = 0;

  std::thread thread;
  std::mutex mutex;                    // guards intake, sleeping, stop, submitted
  std::condition_variable wake;
  std::vector<Item> intake;
  bool sleeping = false;
  bool stop = false;
  bool caller_driven = true;           // false: CARDSIM_SIM_DRIVER=thread
  bool driving = false;                // a caller is running the simulation
  std::vector<Item> drive_batch;       // the driver's batch, swapped with the intake (keeps both allocated)
  std::vector<Request*> batch_requests;   // simulate()'s requests of its batch (touched by the running simulation only)
  std::vector<uint64_t> submitted;     // per (device, queue)
  // Where a wait answered without running the simulation (answersAtOnce) would have run it
  // to: the next run goes there first, so every later command meets the simulation where it
  // would have been (a command behind it starts at it).
  TimePs deferred_horizon = 0;

  // Touched only by the thread running the simulation (the driver or the simulation thread).
  std::vector<std::unique_ptr<Card>> cards;
  // The preset's fabric among this process's devices (none: the preset has no fabric).
  std::unique_ptr<fabric::FabricParams> fabric_params;
  std::string fabric_error;             // why there are no fabric_params
  std::unique_ptr<model::FabricLinks> fabric;
  std::vector<uint64_t> completed;     // per (device, queue)
  std::vector<TimePs> last_end;        // per (device, queue): end of the latest completed command
  std::vector<PendingWait> waits;
  std::string fatal;

  // Collective ends the fabric server may still move (holdCollectiveEnd), and how far the
  // simulation was let run past such ends: every held end after sealed_ps stops a run there
  // unless its requests need more. Guarded by ends_mutex (host threads add and move them).
  mutable std::mutex ends_mutex;
  std::vector<std::shared_ptr<CollectiveEnd>> held_ends;
  std::atomic<bool> any_held{false};   // !held_ends.empty(), read without the lock (most runs hold none)
  TimePs sealed_ps = 0;
  static constexpr TimePs kNoEnd = std::numeric_limits<TimePs>::max();
  TimePs heldEnd();            // the earliest held end not sealed (kNoEnd: none)
  void seal(TimePs to);

  std::atomic<bool> recording{false};
  std::mutex activity_mutex;
  std::vector<Activity> activities;
  std::atomic<uint64_t> completed_total{0};

  mutable std::mutex names_mutex;
  std::vector<std::string> names{""};
  std::unordered_map<std::string, uint32_t> name_ids;

  size_t slot(DeviceId d, QueueId q) const {
    return static_cast<size_t>(index(d)) * queues_per_device + index(q);
  }

  void buildModel();
  void threadMain(std::promise<void>* ready);
  // Caller-driven mode: the thread that needs an answer runs the simulation itself until
  // the intake is empty (one such driver at a time, `driving` under `mutex`).
  void driveUntilIdle();
  // Queues a batch's commands and runs the simulation until its requests are answered,
  // after running it to `deferred` (a deferred_horizon taken with the batch).
  void simulate(std::vector<Item>& batch, TimePs deferred);
  // Runs every event before `horizon`, stopping at a held collective end unless events up to
  // `needed` (exclusive) are asked for by requests: that end is then sealed and passed.
  void runTo(TimePs horizon, TimePs needed);
  void handle(Request* r);
  void onComplete(DeviceId device, QueueId queue, const Command& cmd, TimePs start,
                  TimePs end) override;
  // Returns the command's seq (0 for a request). A request answered at the intake, without
  // joining it, sets *answered (see answersAtOnce).
  uint64_t push(Item item, bool* answered = nullptr);
  // `r` lives on the caller's stack: it is answered (and out of every list) before ask returns.
  Reply ask(Request& r);
  // Under `mutex`: whether `r` is a wait whose points have all completed while nothing waits
  // to be simulated and nobody runs it (so `completed` is stable and its last writer's stores
  // are visible). Its answer is then its own time, and the run to that time it stands in for
  // is deferred to the next run (deferred_horizon).
  bool answersAtOnce(const Request& r);
  void shutdown();
};

void Simulator::Impl::buildModel() {
  try {
    for (uint32_t d = 0; d < devices; ++d)
      cards.push_back(std::make_unique<Card>(("device_" + std::to_string(d)).c_str(), DeviceId{d},
                                             params, *this, cards));
    if (fabric_params && devices > 1) {
      fabric::FabricParams p = *fabric_params;
      p.nodes = fabric::nodesFor(p, devices);
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
      fatal = failedInside(e);
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
      const TimePs held = heldEnd();
      if (held == kNoEnd) {
        sc_core::sc_start();
      } else {
        if (held > simNowPs()) sc_core::sc_start(sc_core::sc_time::from_value(held - simNowPs()));
        if (!waits.empty() && simNowPs() >= held) {
          seal(held);
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
    fatal = failedInside(e);
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
    const TimePs held = heldEnd();
    const TimePs to = std::min(horizon, held);
    if (to > now) sc_core::sc_start(sc_core::sc_time::from_value(to - now));
    if (held >= horizon || held >= needed) return;   // nothing held before the horizon, or not asked past it
    seal(held);
  }
}

TimePs Simulator::Impl::heldEnd() {
  if (!any_held.load(std::memory_order_acquire)) return kNoEnd;
  std::lock_guard<std::mutex> lock(ends_mutex);
  TimePs first = kNoEnd;
  for (const auto& e : held_ends) first = std::min(first, e->end_ps.load());
  return first;
}

void Simulator::Impl::seal(TimePs to) {
  std::lock_guard<std::mutex> lock(ends_mutex);
  sealed_ps = std::max(sealed_ps, to);
  held_ends.erase(std::remove_if(held_ends.begin(), held_ends.end(),
                                 [&](const std::shared_ptr<CollectiveEnd>& e) { return e->end_ps.load() <= sealed_ps; }),
                  held_ends.end());
  any_held.store(!held_ends.empty(), std::memory_order_release);
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
  if (!rep.error.empty()) throw std::runtime_error("cardsim: " + rep.error);
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

Simulator& Simulator::start(const SimOptions& options) {
  std::lock_guard<std::mutex> lock(g_start_mutex);
  if (g_simulator) {
    if (!sameOptions(g_simulator->options(), options))
      throw ConfigError("the simulator is already running with preset \"" +
                        g_simulator->options().preset + "\" and " +
                        std::to_string(g_simulator->deviceCount()) +
                        " devices; one process simulates one configuration (asked for preset \"" +
                        options.preset + "\" with " + std::to_string(options.devices) + " devices)");
    return *g_simulator;
  }
  // Never deleted: SystemC's context lives as long as the process. The thread is
  // stopped at exit, before static destructors run.
  g_simulator = new Simulator(options);
  static const pid_t owner = getpid();
  std::atexit([] {
    // A forked child inherits this handler but not the simulation thread.
    if (g_simulator && getpid() == owner) g_simulator->impl_->shutdown();
  });
  return *g_simulator;
}

Simulator* Simulator::running() {
  std::lock_guard<std::mutex> lock(g_start_mutex);
  return g_simulator;
}

Simulator::Simulator(const SimOptions& options) : impl_(std::make_unique<Impl>()) {
  if (options.devices < 1) throw ConfigError("device count must be at least 1");
  impl_->options = options;
  impl_->params = loadDeviceParams(options);
  // Peer copies cross the fabric where the preset has one; a preset without one (or one
  // the fabric configuration refuses: collectives report that) copies over PCIe.
  try {
    impl_->fabric_params = std::make_unique<fabric::FabricParams>(loadFabricParams(options));
  } catch (const std::exception& e) {
    impl_->fabric_params.reset();
    impl_->fabric_error = e.what();
  }
  hostclock::configureFromEnvironment();
  impl_->devices = options.devices;
  impl_->queues_per_device = impl_->params.queues.hardware_queues;
  const size_t slots = static_cast<size_t>(impl_->devices) * impl_->queues_per_device;
  impl_->submitted.assign(slots, 0);
  impl_->completed.assign(slots, 0);
  impl_->last_end.assign(slots, 0);
  // SystemC prints a banner when its context is created unless told not to.
  setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 0);
  if (const char* env = std::getenv("CARDSIM_SIM_DRIVER"); env && *env) {
    const std::string v = env;
    if (v != "thread" && v != "caller")
      throw ConfigError("CARDSIM_SIM_DRIVER: \"" + v + "\" is not a driver (valid: thread, caller)");
    impl_->caller_driven = v == "caller";
  }
  if (impl_->caller_driven) {
    impl_->buildModel();
    return;
  }
  std::promise<void> ready;
  std::future<void> ready_f = ready.get_future();
  impl_->thread = std::thread([this, &ready] { impl_->threadMain(&ready); });
  try {
    ready_f.get();
  } catch (...) {
    impl_->thread.join();
    throw;
  }
}

Simulator::~Simulator() { impl_->shutdown(); }

const SimOptions& Simulator::options() const { return impl_->options; }
const DeviceParams& Simulator::params() const { return impl_->params; }
const fabric::FabricParams* Simulator::fabricParams() const { return impl_->fabric_params.get(); }
const std::string& Simulator::fabricError() const { return impl_->fabric_error; }
uint32_t Simulator::deviceCount() const { return impl_->devices; }

TimePs Simulator::hostNow() const { return hostclock::now(); }

void Simulator::hostAdvance(double seconds) {
  hostclock::advance(model::secondsToPs(seconds) + hostclock::measuredSinceLastReturn());
}

double Simulator::measuredHostFactor() const { return hostclock::measuredFactor(); }
void Simulator::hostClockJoin(TimePs t) { hostclock::raise(t); }
bool Simulator::hostClockStarted() const { return hostclock::started(); }
void Simulator::shareHostClockBegin() { hostclock::shareBegin(); }
void Simulator::shareHostClockEnd() { hostclock::shareEnd(); }

QueuePoint Simulator::submit(DeviceId device, QueueId queue, Command cmd, double host_overhead_s) {
  if (index(device) >= impl_->devices || index(queue) >= impl_->queues_per_device)
    throw std::out_of_range("cardsim: no hardware queue " + std::to_string(index(queue)) +
                            " on device " + std::to_string(index(device)));
  hostAdvance(host_overhead_s);
  cmd.ready_ps = hostclock::now();
  cmd.submitted_ps = cmd.ready_ps;
  Item item;
  item.device = device;
  item.queue = queue;
  item.cmd = std::move(cmd);
  return QueuePoint{device, queue, impl_->push(std::move(item))};
}

QueuePoint Simulator::tail(DeviceId device, QueueId queue) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return QueuePoint{device, queue, impl_->submitted[impl_->slot(device, queue)]};
}

std::vector<QueuePoint> Simulator::deviceTails(DeviceId device) const {
  std::vector<QueuePoint> points;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (uint32_t q = 0; q < impl_->queues_per_device; ++q) {
    const uint64_t s = impl_->submitted[impl_->slot(device, QueueId{q})];
    if (s > 0) points.push_back(QueuePoint{device, QueueId{q}, s});
  }
  return points;
}

TimePs Simulator::waitFor(std::vector<QueuePoint> points, double overhead_s) {
  hostAdvance(overhead_s);
  Request r;
  r.kind = Request::Kind::Wait;
  points.erase(std::remove_if(points.begin(), points.end(), [](const QueuePoint& p) { return p.seq == 0; }),
               points.end());
  r.points = std::move(points);
  r.at_ps = hostclock::now();
  if (r.points.empty()) return hostclock::now();
  // (A synchronize right after a synchronous copy is answered at the intake: answersAtOnce.)
  Reply rep = impl_->ask(r);
  const TimePs after = hostclock::raise(rep.time_ps);
  hostclock::noteReturn();
  return after;
}

void Simulator::reach(const QueuePoint& point) {
  if (point.seq == 0) return;
  Request r;
  r.kind = Request::Kind::Peek;
  r.points.push_back(point);
  impl_->ask(r);
  hostclock::noteReturn();
}

TimePs Simulator::queueFreeAt(DeviceId device, QueueId queue) {
  const QueuePoint p = tail(device, queue);
  Request r;
  r.kind = Request::Kind::Peek;
  r.points.push_back(p);
  r.at_ps = 0;
  const TimePs t = impl_->ask(r).time_ps;
  hostclock::noteReturn();
  return t;
}

bool Simulator::query(const std::vector<QueuePoint>& points, double overhead_s) {
  hostAdvance(overhead_s);
  Request r;
  r.kind = Request::Kind::Query;
  r.points = points;
  r.at_ps = hostclock::now();
  const bool done = impl_->ask(r).done;
  hostclock::noteReturn();
  return done;
}

void Simulator::holdCollectiveEnd(std::shared_ptr<CollectiveEnd> end) {
  std::lock_guard<std::mutex> lock(impl_->ends_mutex);
  if (end->end_ps.load() <= impl_->sealed_ps) return;
  impl_->held_ends.push_back(std::move(end));
  impl_->any_held.store(true, std::memory_order_release);
}

void Simulator::moveCollectiveEnd(const std::shared_ptr<CollectiveEnd>& end, TimePs to) {
  std::lock_guard<std::mutex> lock(impl_->ends_mutex);
  // Sealed: the simulation may have completed it there already (another host thread's
  // request moved past it while this one waited for the server): it keeps its end.
  if (end->end_ps.load() <= impl_->sealed_ps || to <= end->end_ps.load()) return;
  end->end_ps.store(to);
}

TimePs Simulator::sealedPs() const {
  std::lock_guard<std::mutex> lock(impl_->ends_mutex);
  return impl_->sealed_ps;
}

void Simulator::setRecording(bool on) { impl_->recording.store(on); }

std::vector<Activity> Simulator::drainActivities() {
  bool behind = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    behind = impl_->deferred_horizon > 0;
  }
  if (behind && impl_->recording.load()) {
    // Commands that a deferred run would have completed are reported as they would have been.
    Request r;
    r.kind = Request::Kind::Query;   // no points, at time 0: runs nothing beyond the deferred run
    try {
      impl_->ask(r);
    } catch (const std::exception&) {
      // The model failed: the next call that needs it says so.
    }
  }
  std::lock_guard<std::mutex> lock(impl_->activity_mutex);
  std::vector<Activity> out;
  out.swap(impl_->activities);
  return out;
}

uint32_t Simulator::internName(std::string_view name) {
  std::lock_guard<std::mutex> lock(impl_->names_mutex);
  auto it = impl_->name_ids.find(std::string(name));
  if (it != impl_->name_ids.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(impl_->names.size());
  impl_->names.emplace_back(name);
  impl_->name_ids.emplace(std::string(name), id);
  return id;
}

std::string Simulator::nameOf(uint32_t id) const {
  std::lock_guard<std::mutex> lock(impl_->names_mutex);
  return id < impl_->names.size() ? impl_->names[id] : std::string();
}

DeviceCounters Simulator::counters(DeviceId device) {
  if (index(device) >= impl_->devices)
    throw std::out_of_range("cardsim: no device " + std::to_string(index(device)));
  Request r;
  r.kind = Request::Kind::Counters;
  r.device = device;
  r.at_ps = hostclock::now();
  return impl_->ask(r).counters;
}

uint64_t Simulator::commandsCompleted() const { return impl_->completed_total.load(); }

}  // namespace cardsim::sim

// libsystemc.so leaves sc_main undefined and Python loads extensions with RTLD_NOW, so
// the embedded simulator defines one (in this file, which every user links). cardsim
// never calls it: the simulator drives sc_start() itself.
int sc_main(int, char**) { return 0; }
