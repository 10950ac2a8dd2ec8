#include "simulator/SchedulerBaseline.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <systemc>

namespace cardsim::sim {
namespace {

struct PingPong : sc_core::sc_module {
  sc_core::sc_event ping, pong;
  long wakeups = 0;
  SC_HAS_PROCESS(PingPong);
  explicit PingPong(sc_core::sc_module_name n) : sc_module(n) {
    SC_THREAD(a);
    SC_THREAD(b);
  }
  void a() {
    for (;;) {
      ping.notify(1, sc_core::SC_NS);
      wait(pong);
      ++wakeups;
    }
  }
  void b() {
    for (;;) {
      wait(ping);
      ++wakeups;
      pong.notify(1, sc_core::SC_NS);
    }
  }
};

}  // namespace

double measureSchedulerWakeupsPerSecond(double seconds) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(fds[0]);
    setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 1);
    PingPong pp("ping_pong");
    sc_core::sc_start(sc_core::SC_ZERO_TIME);
    const auto t0 = std::chrono::steady_clock::now();
    double elapsed = 0;
    while (elapsed < seconds) {
      sc_core::sc_start(100, sc_core::SC_US);
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    const double rate = static_cast<double>(pp.wakeups) / elapsed;
    if (write(fds[1], &rate, sizeof rate) != sizeof rate) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  double rate = -1;
  if (read(fds[0], &rate, sizeof rate) != sizeof rate) rate = -1;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return rate;
}

}  // namespace cardsim::sim
