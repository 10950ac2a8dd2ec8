// The status board (StatusBoard.h): a JSON file per process for the management tools.
#include "StatusBoard.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "Backend.h"
#include "ProcessExit.h"

namespace cardsim::shim {
namespace {

// The utilization window: from the newest sample at least this old (wall time) to now.
constexpr std::chrono::seconds kWindow{1};

std::atomic<StatusBoard*> g_board{nullptr};

int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string readSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      // Control characters, and bytes that may not be valid UTF-8 (command lines are bytes).
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// Field 22 of /proc/self/stat: when the process started, in clock ticks after boot.
std::string startTicks() {
  const std::string stat = readSmallFile("/proc/self/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return "0";
  std::istringstream fields(stat.substr(paren + 1));
  std::string f;
  for (int i = 3; i <= 22 && (fields >> f); ++i) {
  }
  return f.find_first_not_of("0123456789") == std::string::npos && !f.empty() ? f : "0";
}

std::string processName() {
  std::string name = readSmallFile("/proc/self/comm");
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return name;
}

std::string commandLine() {
  std::string cmd = readSmallFile("/proc/self/cmdline");
  for (char& c : cmd)
    if (c == '\0') c = ' ';
  while (!cmd.empty() && cmd.back() == ' ') cmd.pop_back();
  if (cmd.size() > 1024) cmd.resize(1024);
  return cmd;
}

bool makeDirectories(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string part = dir.substr(0, i);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return false;
  }
  return access(dir.c_str(), W_OK | X_OK) == 0;
}

// "<pid>.json" or ".<pid>.json.tmp": the pid, else 0.
long pidOfEntry(const std::string& name) {
  std::string s = name;
  if (s.size() > 5 && s.compare(s.size() - 4, 4, ".tmp") == 0 && s[0] == '.')
    s = s.substr(1, s.size() - 5);
  if (s.size() <= 5 || s.compare(s.size() - 5, 5, ".json") != 0) return 0;
  s.resize(s.size() - 5);
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 9) return 0;
  return std::strtol(s.c_str(), nullptr, 10);
}

// Removes the files of processes that ended without removing theirs (killed, crashed).
void sweepStale(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    const long pid = pidOfEntry(e->d_name);
    if (pid <= 0 || pid == getpid()) continue;
    if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      unlink((dir + "/" + e->d_name).c_str());
  }
  closedir(d);
}

}  // namespace

std::string StatusBoard::defaultDirectory() {
  const char* env = std::getenv("CARDSIM_STATUS_DIR");
  if (env && *env) return env;
  return "/tmp/cardsim-status-" + std::to_string(getuid());
}

void StatusBoard::startForProcess(IBackend* backend) {
  static std::once_flag once;
  std::call_once(once, [backend] {
    // The signal handlers go in before the file can appear (its writer starts in the
    // constructor): a signal in between would leave the file behind (ProcessExit.h).
    const std::string dir = defaultDirectory(), pid = std::to_string(getpid());
    process_exit::unlinkOnSignal(dir + "/" + pid + ".json");
    process_exit::unlinkOnSignal(dir + "/." + pid + ".json.tmp");
    StatusBoard* board = nullptr;
    try {
      board = new StatusBoard(backend, dir);
    } catch (const std::exception&) {
      board = nullptr;   // the board is never worth failing the runtime for
    }
    if (!board || !board->active()) {
      delete board;
      return;
    }
    g_board = board;
    // Never deleted (a late malloc on another thread may still reach it): when the process
    // ends, the writer stops and the file goes.
    process_exit::onExit([](const std::string&) {
      if (StatusBoard* b = g_board.load()) b->stop();
    });
  });
}

Status StatusBoard::afterMemoryCall(Status s) {
  if (s.ok()) {
    if (StatusBoard* b = g_board.load(std::memory_order_acquire)) b->memoryChanged();
  }
  return s;
}

StatusBoard::StatusBoard(IBackend* backend, std::string directory,
                         std::chrono::milliseconds period, std::chrono::milliseconds min_interval)
    : backend_(backend), dir_(std::move(directory)), period_(period), min_interval_(min_interval) {
  DeviceProperties props;
  uint64_t used = 0, total = 0;
  if (!backend_ || !backend_->getDeviceCount(&devices_).ok() || devices_ < 1 ||
      !backend_->getDeviceProperties(&props, 0).ok() ||
      !backend_->deviceUsage(0, &used, &total, nullptr).ok())
    return;  // no device model behind this backend: nothing to show
  if (dir_.empty() || !makeDirectories(dir_)) return;
  clusters_ = props.cluster_count > 0 ? props.cluster_count : 1;
  const std::string pid = std::to_string(getpid());
  path_ = dir_ + "/" + pid + ".json";
  tmp_path_ = dir_ + "/." + pid + ".json.tmp";
  sweepStale(dir_);
  header_ = "{\"format\": 1, \"pid\": " + pid + ", \"start_ticks\": " + startTicks() +
            ", \"name\": " + jsonString(processName()) +
            ", \"cmdline\": " + jsonString(commandLine()) +
            ", \"preset\": " + jsonString(props.preset) + ", \"card\": " + jsonString(props.name) +
            ", \"vendor\": " + jsonString(props.vendor);
  active_ = true;
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::system_error&) {
    active_ = false;   // no thread to keep the file current: do without the board
  }
}

StatusBoard::~StatusBoard() { stop(); }

void StatusBoard::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(write_mutex_);
  if (active_) {
    unlink(path_.c_str());
    unlink(tmp_path_.c_str());
  }
  active_ = false;
}

void StatusBoard::memoryChanged() {
  const int64_t now = steadyNs();
  int64_t last = last_write_ns_.load(std::memory_order_relaxed);
  if (now - last < std::chrono::nanoseconds(min_interval_).count()) return;  // a later write shows it
  // One caller claims the early write; the others find it claimed.
  if (!last_write_ns_.compare_exchange_strong(last, now)) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    write_requested_ = true;
  }
  wake_.notify_one();
}

void StatusBoard::run() {
  writeNow();  // show up at once
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, period_, [this] { return stop_ || write_requested_; });
    if (stop_) break;
    write_requested_ = false;
    lock.unlock();
    writeNow();
    lock.lock();
  }
}

StatusBoard::Sample StatusBoard::sample() {
  Sample s;
  s.wall = std::chrono::steady_clock::now();
  s.used.assign(static_cast<size_t>(devices_), 0);
  s.total.assign(static_cast<size_t>(devices_), 0);
  s.busy_cluster_s.assign(static_cast<size_t>(devices_), 0.0);
  s.busy_memory_s.assign(static_cast<size_t>(devices_), 0.0);
  const std::vector<double> previous =
      history_.empty() ? s.busy_cluster_s : history_.back().busy_cluster_s;
  const std::vector<double> previous_memory =
      history_.empty() ? s.busy_memory_s : history_.back().busy_memory_s;
  auto take = [&] {
    (void)backend_->hostTimePs(&s.host_ps);
    for (int d = 0; d < devices_; ++d) {
      const size_t i = static_cast<size_t>(d);
      s.busy_cluster_s[i] = previous[i];
      s.busy_memory_s[i] = previous_memory[i];
      if (!backend_->deviceUsage(d, &s.used[i], &s.total[i], nullptr).ok()) continue;
      // Only a device holding memory can have run kernels since: ask the model about it
      // (one round trip to the simulation thread); the others keep their last figure.
      if (s.used[i] > 0) {
        uint64_t u = 0, t = 0;
        double busy = 0, busy_memory = 0;
        if (backend_->deviceUsage(d, &u, &t, &busy, &busy_memory).ok()) {
          s.busy_cluster_s[i] = busy;
          s.busy_memory_s[i] = busy_memory;
        }
      }
    }
  };
  // A thread's simulated clock starts, at its first call, at the latest host time of the
  // process (Simulator.h): sampled from a fresh thread, "now" is the process's present,
  // not the time of this thread's last call, and the model is asked about that moment.
  try {
    std::thread(take).join();
  } catch (const std::system_error&) {
    take();
  }
  return s;
}

std::string StatusBoard::render(const Sample& now, const Sample& old) const {
  const double window_s = now.host_ps > old.host_ps ? (now.host_ps - old.host_ps) * 1e-12 : 0.0;
  char buf[256];
  std::snprintf(buf, sizeof buf, ", \"simulated_s\": %.9f, \"utilization_window_s\": %.9f",
                now.host_ps * 1e-12, window_s);
  std::string out = header_ + buf + ", \"devices\": [";
  for (int d = 0; d < devices_; ++d) {
    const size_t i = static_cast<size_t>(d);
    double util = 0, memory_util = 0;
    if (window_s > 0) {
      util = std::clamp((now.busy_cluster_s[i] - old.busy_cluster_s[i]) / (clusters_ * window_s), 0.0, 1.0);
      memory_util = std::clamp((now.busy_memory_s[i] - old.busy_memory_s[i]) / window_s, 0.0, 1.0);
    }
    std::snprintf(buf, sizeof buf,
                  "%s{\"index\": %d, \"used_bytes\": %llu, \"total_bytes\": %llu, "
                  "\"utilization\": %.4f, \"memory_utilization\": %.4f}",
                  d ? ", " : "", d, static_cast<unsigned long long>(now.used[i]),
                  static_cast<unsigned long long>(now.total[i]), util, memory_util);
    out += buf;
  }
  return out + "]}\n";
}

void StatusBoard::writeNow() {
  std::lock_guard<std::mutex> lock(write_mutex_);
  if (!active_) return;
  last_write_ns_ = steadyNs();
  Sample now = sample();
  while (history_.size() > 1 && now.wall - history_[1].wall >= kWindow) history_.pop_front();
  const std::string text = render(now, history_.empty() ? now : history_.front());
  history_.push_back(std::move(now));
  if (text == last_written_) return;
  const int fd = open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  if (done == text.size() && rename(tmp_path_.c_str(), path_.c_str()) == 0) last_written_ = text;
}

}  // namespace cardsim::shim
