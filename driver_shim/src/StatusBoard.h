// The status board: while a process uses the emulated cards, it keeps a small JSON file
// saying what it holds on them, so that the management tools (cnmon and brsmi, in
// accelerators/python/cardsim_tools) can show running processes, device memory in use and
// utilization as the vendors' tools do.
//
// File: ${CARDSIM_STATUS_DIR:-/tmp/cardsim-status-$UID}/<pid>.json, replaced atomically
// (written to .<pid>.json.tmp, then renamed), removed at normal process exit:
//
//   {"format": 1, "pid": 4242, "start_ticks": 123456, "name": "python3",
//    "cmdline": "python3 train.py", "preset": "mlu370-x8", "card": "MLU370-X8",
//    "vendor": "Cambricon", "simulated_s": 0.25, "utilization_window_s": 0.01,
//    "devices": [{"index": 0, "used_bytes": 67108864, "total_bytes": 24509415424,
//                 "utilization": 0.42, "memory_utilization": 0.61}, ...]}
//
// - one entry per physical device of the backend (before any visible-devices renumbering);
// - used_bytes: device memory this process holds through the shim (what malloc accounts);
// - utilization: the fraction of the device's compute clusters busy, in simulated time,
//   over the recent window: from the sample about one second (wall time) ago to now;
//   utilization_window_s is that window in simulated seconds (0 when the process did not
//   advance simulated time: an idle process shows 0);
// - memory_utilization: the fraction of that window some traffic moved through the
//   device's memory (NVML's memory utilization: torch.<dev>.memory_usage, brsmi's
//   utilization.memory);
// - start_ticks: the process's start time (/proc/<pid>/stat field 22), so that readers can
//   tell a reused pid; readers ignore files whose process is gone.
//
// A writer thread samples every 100 ms of wall time and rewrites the file when it changed;
// a malloc or free asks for an early write, at most one every 50 ms. The board never fails
// the runtime: if the directory cannot be written, the process simply does not show.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cardsim/shim.h"

namespace cardsim::shim {

class IBackend;

class StatusBoard {
 public:
  // Starts this process's board for `backend` (once per process; Runtime.cpp calls it when
  // the backend has started). Nothing happens for a backend without a device model.
  static void startForProcess(IBackend* backend);
  // Runtime.cpp, after a malloc or free: a successful one asks for an early write.
  static Status afterMemoryCall(Status s);
  // ${CARDSIM_STATUS_DIR}, else /tmp/cardsim-status-<uid>.
  static std::string defaultDirectory();

  StatusBoard(IBackend* backend, std::string directory,
              std::chrono::milliseconds period = std::chrono::milliseconds(100),
              std::chrono::milliseconds min_interval = std::chrono::milliseconds(50));
  // Stops the writer thread and removes the file.
  ~StatusBoard();
  StatusBoard(const StatusBoard&) = delete;
  StatusBoard& operator=(const StatusBoard&) = delete;

  bool active() const { return active_; }
  const std::string& path() const { return path_; }
  // Memory changed: write soon (now if the last write is at least min_interval old).
  void memoryChanged();
  // Samples and (re)writes the file now, on the calling thread.
  void writeNow();

 private:
  struct Sample {
    std::chrono::steady_clock::time_point wall;
    uint64_t host_ps = 0;
    std::vector<uint64_t> used, total;
    std::vector<double> busy_cluster_s;
    std::vector<double> busy_memory_s;
  };
  Sample sample();
  std::string render(const Sample& now, const Sample& old) const;
  void run();
  void stop();

  IBackend* backend_;
  std::string dir_, path_, tmp_path_;
  std::chrono::milliseconds period_, min_interval_;
  bool active_ = false;
  int devices_ = 0;
  uint32_t clusters_ = 1;
  std::string header_;   // the fields that do not change: pid, names, preset
  std::deque<Sample> history_;   // writer thread only
  std::string last_written_;     // writer thread only
  std::mutex write_mutex_;       // one write at a time (writer thread, writeNow)
  std::atomic<int64_t> last_write_ns_{0};

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool write_requested_ = false;
  std::thread thread_;
};

}  // namespace cardsim::shim
