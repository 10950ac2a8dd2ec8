// The simulator's API (Simulator.h): start-up, submissions and the host's requests, handed
// to the model's run (SimulatorRun.cpp) through the state in SimulatorImpl.h.
#include "simulator/Simulator.h"

#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "simulator/FabricConfig.h"
#include "simulator/HostClock.h"
#include "simulator/SimulatorImpl.h"

namespace cardsim::sim {

using model::index;

namespace {

std::mutex g_start_mutex;
Simulator* g_simulator = nullptr;

bool sameOptions(const SimOptions& a, const SimOptions& b) {
  return a.preset == b.preset && a.devices == b.devices && a.overrides == b.overrides &&
         a.overrides_file == b.overrides_file;
}

}  // namespace

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

void Simulator::hostAdvance(double seconds) { hostclock::advance(model::secondsToPs(seconds)); }

void Simulator::hostCallBegins() {
  if (hostclock::measuredFactor() > 0) hostclock::advance(hostclock::measuredSinceLastReturn());
}
void Simulator::hostCallReturns() { hostclock::noteReturn(); }

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

void Simulator::holdCollectiveEnd(const std::string& group, uint64_t seq, std::shared_ptr<CollectiveEnd> end) {
  impl_->ends.hold({group, seq}, std::move(end));
}
void Simulator::moveCollectiveEnd(const std::string& group, uint64_t seq, TimePs to) {
  impl_->ends.move({group, seq}, to);
}
TimePs Simulator::sealedPs() const { return impl_->ends.sealed(); }
void Simulator::setBeforeRun(std::function<void()> fn) { impl_->before_run = std::move(fn); }
bool Simulator::callerDriven() const { return impl_->caller_driven; }

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
