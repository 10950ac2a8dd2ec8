// Internal to simulator/: the simulator's state and the requests host threads hand it,
// shared by Simulator.cpp (the API the runtime calls) and SimulatorRun.cpp (running the
// SystemC model: the intake, batches, waits and completions). Include only from those two.
#pragma once

#include <systemc>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "device_models/Card.h"
#include "device_models/FabricLinks.h"
#include "simulator/CollectiveEndLedger.h"
#include "simulator/FabricConfig.h"
#include "simulator/Simulator.h"

namespace cardsim::sim {

inline TimePs simNowPs() { return sc_core::sc_time_stamp().value(); }

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
  std::vector<std::unique_ptr<model::Card>> cards;
  // The preset's fabric among this process's devices (none: the preset has no fabric).
  std::unique_ptr<fabric::FabricParams> fabric_params;
  std::string fabric_error;             // why there are no fabric_params
  std::unique_ptr<model::FabricLinks> fabric;
  std::vector<uint64_t> completed;     // per (device, queue)
  std::vector<TimePs> last_end;        // per (device, queue): end of the latest completed command
  std::vector<PendingWait> waits;
  std::string fatal;
  std::atomic<bool> fatal_overflow{false};   // fatal is a SimulationOverflow (set before any reply)

  // Answered collective ends a run stops at unless its requests need more (holdCollectiveEnd).
  CollectiveEndLedger ends;
  std::function<void()> before_run;   // setBeforeRun: the driver calls it before each run

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

}  // namespace cardsim::sim
