// Simulator throughput and shim call cost, printed as "name: value" lines.
//
//   systemc_wakeups_per_s      raw SystemC thread wake-ups per second here (the baseline)
//   sim_commands_per_s         small kernel launches and copies simulated per wall second
//   sim_vs_systemc_ratio       sim_commands_per_s / systemc_wakeups_per_s, same run
//   shim_call_overhead_ns      host wall time of one asynchronous shim call
//   sim_sync_copy_ns           host wall time of a small copy to the host and the stream
//                              synchronize after it (a .item(): the simulation runs to it)
#include <cardsim/shim.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>

#include "simulator/SchedulerBaseline.h"

namespace shim = cardsim::shim;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void must(const shim::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "bench: %s: %s\n", what, s.toString().c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  long commands = 1000000;
  if (argc > 1) commands = std::atol(argv[1]);

  // Baseline first, in a child process, before this process starts its simulator.
  const double wakeups = cardsim::sim::measureSchedulerWakeupsPerSecond(1.0);

  shim::InitOptions init;
  init.preset = "mlu370-x8";
  init.devices = 1;
  must(shim::initialize(init), "initialize");
  void* dev = nullptr;
  void* host = nullptr;
  must(shim::malloc(&dev, 4096), "malloc");
  must(shim::hostMalloc(&host, 4096), "hostMalloc");
  shim::Stream s;
  must(shim::streamCreate(&s), "streamCreate");

  shim::KernelCost tiny;
  tiny.kernel_class = shim::KernelClass::Elementwise;
  tiny.flops = 1024;
  tiny.bytes_read = 4096;
  tiny.bytes_written = 4096;

  // A long stream of small commands: 3 kernels for every copy.
  const double t0 = now();
  for (long i = 0; i < commands; ++i) {
    if (i % 4 == 3) {
      must(shim::memcpyAsync(dev, host, 4096, shim::MemcpyKind::HostToDevice, s), "memcpyAsync");
    } else {
      must(shim::launchKernel(s, "tiny", tiny, {}), "launchKernel");
    }
  }
  const double t_submitted = now();
  must(shim::streamSynchronize(s), "streamSynchronize");
  const double t1 = now();

  // Synchronizing round trips: each one runs the simulation up to the copy's end.
  const long syncs = std::max(1000L, commands / 50);
  const double t2 = now();
  for (long i = 0; i < syncs; ++i) {
    must(shim::launchKernel(s, "tiny", tiny, {}), "launchKernel");
    must(shim::memcpyAsync(host, dev, 4, shim::MemcpyKind::DeviceToHost, s), "memcpyAsync");
    must(shim::streamSynchronize(s), "streamSynchronize");
  }
  const double t3 = now();

  const double commands_per_s = static_cast<double>(commands) / (t1 - t0);
  const double call_ns = (t_submitted - t0) / static_cast<double>(commands) * 1e9;
  std::printf("systemc_wakeups_per_s: %.0f\n", wakeups);
  std::printf("sim_commands_per_s: %.0f\n", commands_per_s);
  std::printf("sim_vs_systemc_ratio: %.3f\n", wakeups > 0 ? commands_per_s / wakeups : 0.0);
  std::printf("shim_call_overhead_ns: %.0f\n", call_ns);
  std::printf("sim_sync_copy_ns: %.0f\n", (t3 - t2) / static_cast<double>(syncs) * 1e9);
  return 0;
}
