// The SystemC host, embedded: one SystemC context per process for the process lifetime.
// Host threads submit commands and requests through a thread-safe intake; the thread that
// needs an answer runs the simulation itself (one such driver at a time; a thread asking
// meanwhile is answered by the driver), so host threads never touch SystemC objects
// concurrently and a wait costs no thread hand-off. CARDSIM_SIM_DRIVER=thread instead
// keeps a simulation thread that does all of it (the hand-off costs two context switches
// per wait: about 15% of a small ZeRO-3 step's wall time, most of a replay's).
//
// Time: every host thread has a virtual clock advanced by modelled call overheads.
// The simulation only runs up to the latest host time it has been handed (or to the
// completion a waiting host thread needs), and a later call always lands strictly after
// that, so the same command sequence gives the same simulated times whatever the host's
// speed, the batching of the intake or which thread drives.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "device_models/Command.h"
#include "device_models/DeviceParams.h"
#include "simulator/Config.h"

namespace cardsim::fabric {
struct FabricParams;
}  // namespace cardsim::fabric

namespace cardsim::sim {

// The simulation would pass its end (2^63 ps): the configuration's fault (a what-if far
// outside a card's range), not the model's. The simulation is unusable after it, as after
// any failure inside SystemC.
class SimulationOverflow : public std::overflow_error {
 public:
  using std::overflow_error::overflow_error;
};

using model::Command;
using model::CollectiveEnd;
using model::CommandKind;
using model::CopyKind;
using model::DeviceId;
using model::EventSlot;
using model::KernelCost;
using model::QueueId;
using model::QueuePoint;
using model::TimePs;

// One completed command, for timelines and traces.
struct Activity {
  DeviceId device{};
  QueueId queue{};
  uint32_t stream_tag = 0;
  CommandKind kind = CommandKind::Kernel;
  CopyKind copy_kind = CopyKind::HostToDevice;
  uint32_t name_id = 0;
  uint64_t correlation = 0;   // Command::correlation
  TimePs ready_ps = 0;   // handed to the device by the host
  TimePs start_ps = 0;
  TimePs end_ps = 0;
  double flops = 0;
  uint64_t bytes = 0;
};

// Per-device utilisation so far.
struct DeviceCounters {
  double cluster_busy_seconds = 0;   // summed over clusters
  double memory_bytes = 0;
  double memory_busy_seconds = 0;
  double host_link_bytes_to_device = 0;
  double host_link_bytes_to_host = 0;
  uint64_t commands_completed = 0;
};

class Simulator {
 public:
  // Starts the process-wide simulator on first use. A later call with different
  // options throws ConfigError: SystemC cannot be restarted in one process.
  static Simulator& start(const SimOptions& options);
  // The running simulator, or nullptr.
  static Simulator* running();

  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  const SimOptions& options() const;
  const DeviceParams& params() const;
  // The preset's fabric as loaded at start; null, with fabricError() saying why, if the
  // preset has none or its fabric configuration was refused.
  const fabric::FabricParams* fabricParams() const;
  const std::string& fabricError() const;
  uint32_t deviceCount() const;

  // The calling host thread's virtual clock.
  TimePs hostNow() const;
  void hostAdvance(double seconds);
  // Between these, every host thread of the process advances one shared clock that starts
  // at the calling thread's time; at the end the caller continues from it (shim
  // hostClockShareBegin/End: a thread blocked on work it handed to another thread).
  void shareHostClockBegin();
  void shareHostClockEnd();
  // The calling thread continues no earlier than `t` (it joined a thread that ended there).
  void hostClockJoin(TimePs t);
  // CARDSIM_HOST_TIME: 0 for the modelled host (default), else the factor on measured time.
  double measuredHostFactor() const;
  // CARDSIM_HOST_TIME=measured: a runtime call of the calling thread begins (its clock takes
  // the wall time the thread spent outside the runtime since its last call returned, times
  // the factor, before anything of the call) and returns (that time counts again from here).
  // Outermost calls only; no-ops in the default mode.
  void hostCallBegins();
  void hostCallReturns();
  // Whether the calling thread has a clock yet (has called into the runtime).
  bool hostClockStarted() const;

  // Advances the host clock by `host_overhead_s`, then queues `cmd` on (device, queue);
  // returns the point right after it. cmd.seq and cmd.ready_ps are filled in here.
  QueuePoint submit(DeviceId device, QueueId queue, Command cmd, double host_overhead_s);
  // The point after the last command queued on (device, queue) so far.
  QueuePoint tail(DeviceId device, QueueId queue) const;
  std::vector<QueuePoint> deviceTails(DeviceId device) const;

  // Blocks until every point has completed; the host clock moves to the later of its
  // own time plus `overhead_s` and the last completion. Returns the host time after.
  TimePs waitFor(std::vector<QueuePoint> points, double overhead_s);
  // The earliest a command queued now on (device, queue) can start, its ready time aside:
  // the later of the queue's last completion and the simulation's current time (a command
  // is never started in the simulation's past). Blocks until the simulation gets there,
  // without moving the host clock. A rank's arrival at a collective on the fabric server.
  TimePs queueFreeAt(DeviceId device, QueueId queue);
  // Blocks until `point` has completed (the simulation runs to it), without moving the host
  // clock: an event's time is then in its slot.
  void reach(const QueuePoint& point);
  // Advances the host clock by `overhead_s`; true if every point had completed by then.
  bool query(const std::vector<QueuePoint>& points, double overhead_s);

  // Collective ends the fabric server may still move later (FabricClient's Revise): the
  // simulation is let past such an end only for a request that needs it (a wait, a query,
  // a peek: never for queued commands alone, nor for counters), which seals it; a move
  // of an end already sealed is ignored. Determined by the program's calls alone, so the
  // same with either driver (CARDSIM_SIM_DRIVER).
  // The collective is named as the fabric server names it: its group and sequence number.
  void holdCollectiveEnd(const std::string& group, uint64_t seq, std::shared_ptr<CollectiveEnd> end);
  void moveCollectiveEnd(const std::string& group, uint64_t seq, TimePs to);
  // The simulation may have run to this time: ends at or before it are sealed.
  TimePs sealedPs() const;
  // Called by the thread about to run the simulation, before it runs (outside every lock of
  // the simulator's): collectives whose ends are not known yet (reported to the fabric server,
  // unanswered) get them there. Only with the caller-driven driver (callerDriven()); set
  // once, before such collectives exist.
  void setBeforeRun(std::function<void()> fn);
  bool callerDriven() const;

  // Timeline of completed commands, kept while recording is on.
  void setRecording(bool on);
  std::vector<Activity> drainActivities();
  uint32_t internName(std::string_view name);
  std::string nameOf(uint32_t id) const;

  // Counters as of the simulation's current time (a consistent snapshot).
  DeviceCounters counters(DeviceId device);
  uint64_t commandsCompleted() const;

 private:
  explicit Simulator(const SimOptions& options);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cardsim::sim
