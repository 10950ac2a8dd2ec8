#include "simulator/HostClock.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>

#include "simulator/Config.h"

namespace cardsim::sim::hostclock {

namespace {

thread_local TimePs t_host_ps = 0;
thread_local bool t_host_started = false;
std::atomic<TimePs> g_latest_host_ps{0};

void noteHostTime(TimePs t) {
  TimePs seen = g_latest_host_ps.load(std::memory_order_relaxed);
  while (t > seen && !g_latest_host_ps.compare_exchange_weak(seen, t)) {
  }
}

// The shared clock of Simulator::shareHostClockBegin/End: while active, every host thread
// advances `ps` instead of its own clock. One at a time per process (nested begins are no-ops).
struct SharedClock {
  std::mutex mutex;                 // begin and end
  std::atomic<bool> active{false};
  std::atomic<TimePs> ps{0};
  std::atomic<uint64_t> epoch{0};   // shares ended so far
  std::atomic<TimePs> last_end{0};  // the clock when the latest share ended
};
SharedClock g_share;
thread_local int t_share_depth = 0;        // begin/end nesting on this thread
thread_local bool t_share_owner = false;   // this thread's outermost begin activated the share
thread_local uint64_t t_share_joined = 0;  // 1 + epoch of the share this thread last used

TimePs& ownClock() {
  // A thread that first calls in late starts at the latest host time seen so far, not 0.
  if (!t_host_started) {
    t_host_started = true;
    t_host_ps = g_latest_host_ps.load();
  }
  // A thread that worked on a share continues, after it ended, from where it ended.
  if (t_share_joined != 0 && g_share.epoch.load(std::memory_order_acquire) >= t_share_joined) {
    t_host_ps = std::max(t_host_ps, g_share.last_end.load());
    t_share_joined = 0;
  }
  return t_host_ps;
}

bool sharing() {
  if (!g_share.active.load(std::memory_order_acquire)) return false;
  t_share_joined = g_share.epoch.load(std::memory_order_relaxed) + 1;
  return true;
}

// Measured host time (CARDSIM_HOST_TIME=measured[:factor]): besides the modelled overhead,
// each call advances the clock by the wall time the thread spent outside the runtime since
// its previous call returned, times the factor. Off (factor 0) by default: real time makes
// simulated times depend on the host's speed and load.
std::atomic<double> g_measured_factor{0.0};
thread_local std::chrono::steady_clock::time_point t_last_return;
thread_local bool t_has_last_return = false;

}  // namespace

TimePs now() { return sharing() ? g_share.ps.load() : ownClock(); }

TimePs measuredSinceLastReturn() {
  const double factor = g_measured_factor.load(std::memory_order_relaxed);
  if (factor <= 0) return 0;
  const auto wall = std::chrono::steady_clock::now();
  const double gap = t_has_last_return ? std::chrono::duration<double>(wall - t_last_return).count() : 0.0;
  t_last_return = wall;
  t_has_last_return = true;
  return model::secondsToPs(gap * factor);
}
// A call that blocked (a wait) returns now: its blocked time is not host work.
void noteReturn() {
  if (g_measured_factor.load(std::memory_order_relaxed) <= 0) return;
  t_last_return = std::chrono::steady_clock::now();
  t_has_last_return = true;
}

TimePs advance(TimePs d) {
  TimePs t;
  if (sharing()) t = g_share.ps.fetch_add(d) + d;
  else t = (ownClock() += d);
  noteHostTime(t);
  return t;
}

TimePs raise(TimePs t) {
  TimePs after;
  if (sharing()) {
    after = g_share.ps.load();
    while (t > after && !g_share.ps.compare_exchange_weak(after, t)) {
    }
    after = std::max(after, t);
  } else {
    TimePs& h = ownClock();
    h = std::max(h, t);
    after = h;
  }
  noteHostTime(after);
  return after;
}

double measuredFactor() { return g_measured_factor.load(); }
bool started() { return t_host_started || g_share.active.load(); }

void shareBegin() {
  if (t_share_depth++ > 0) return;
  std::lock_guard<std::mutex> lock(g_share.mutex);
  if (g_share.active.load()) return;   // inside another thread's share: work on it
  g_share.ps.store(ownClock());
  g_share.active.store(true, std::memory_order_release);
  t_share_owner = true;
}

void shareEnd() {
  if (t_share_depth == 0 || --t_share_depth > 0) return;
  if (!t_share_owner) return;
  t_share_owner = false;
  std::lock_guard<std::mutex> lock(g_share.mutex);
  const TimePs end = g_share.ps.load();
  g_share.active.store(false, std::memory_order_release);
  g_share.last_end.store(end);
  g_share.epoch.fetch_add(1, std::memory_order_acq_rel);
  t_share_joined = 0;
  TimePs& h = ownClock();
  h = std::max(h, end);
  noteHostTime(h);
}

void configureFromEnvironment() {
  if (const char* env = std::getenv("CARDSIM_HOST_TIME"); env && *env) {
    const std::string v = env;
    double factor = -1;
    if (v == "model") factor = 0;
    else if (v == "measured") factor = 1;
    else if (v.rfind("measured:", 0) == 0) {
      char* end = nullptr;
      factor = std::strtod(v.c_str() + 9, &end);
      if (*end != '\0' || !(factor > 0) || factor > 1e6) factor = -1;
    }
    if (factor < 0)
      throw ConfigError("CARDSIM_HOST_TIME: \"" + v + "\" is not a host-time mode (valid: model, measured, "
                        "measured:FACTOR with FACTOR > 0)");
    g_measured_factor.store(factor);
  }
}

}  // namespace cardsim::sim::hostclock
