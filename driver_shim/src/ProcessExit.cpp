#include "ProcessExit.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cardsim/process.h"

namespace cardsim::shim::process_exit {

namespace {

struct Entry {
  Cleanup fn;
  pid_t owner = 0;   // a forked child inherits the atexit entries, not what they clean up
  enum class State { Pending, Running, Done } state = State::Pending;
};

// Never destroyed: the atexit entries and the watcher may use it during static destruction.
struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<Entry>> entries;
  std::condition_variable finished;
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// Runs `e` unless it ran; if another thread is running it (Python's atexit while a signal's
// cleanup starts, or the other way round), waits until it is done: whoever ends the process
// next must find the trace complete.
void runEntry(const std::shared_ptr<Entry>& e, const std::string& reason) {
  Registry& r = registry();
  {
    std::unique_lock<std::mutex> lock(r.mutex);
    if (::getpid() != e->owner) return;
    if (e->state == Entry::State::Running) r.finished.wait(lock, [&] { return e->state == Entry::State::Done; });
    if (e->state == Entry::State::Done) return;
    e->state = Entry::State::Running;
  }
  try {
    e->fn(reason);
  } catch (...) {
    // A cleanup never stops the others, nor the exit.
  }
  std::lock_guard<std::mutex> lock(r.mutex);
  e->state = Entry::State::Done;
  r.finished.notify_all();
}

// ---- Signals -----------------------------------------------------------------------------
constexpr int kSignals[] = {SIGTERM, SIGHUP, SIGINT};
constexpr int kMaxPaths = 4;
char g_paths[kMaxPaths][512];
std::atomic<int> g_path_count{0};
int g_pipe[2] = {-1, -1};
pid_t g_signal_owner = 0;
std::atomic<int> g_caught{0};

[[noreturn]] void dieBy(int sig) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(sig, &dfl, nullptr);
  // Called inside the handler (which blocks the signal) or on the watcher (which blocks it
  // always): unblocked here, the default action takes the whole process at once.
  sigset_t just;
  sigemptyset(&just);
  sigaddset(&just, sig);
  pthread_sigmask(SIG_UNBLOCK, &just, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);   // not reached
}

void onSignal(int sig) {
  const int saved_errno = errno;
  // A forked child has no watcher, and the files are its parent's: it just goes.
  if (::getpid() != g_signal_owner) dieBy(sig);
  const int n = g_path_count.load();
  for (int i = 0; i < n && i < kMaxPaths; ++i) ::unlink(g_paths[i]);
  int expected = 0;
  if (!g_caught.compare_exchange_strong(expected, sig)) dieBy(sig);   // a second signal: now
  const char c = static_cast<char>(sig);
  if (::write(g_pipe[1], &c, 1) != 1) dieBy(sig);
  errno = saved_errno;
}

std::string signalName(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    default: return std::to_string(sig);
  }
}

void watch() {
  char c = 0;
  ssize_t n;
  do {
    n = ::read(g_pipe[0], &c, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) return;
  const int sig = static_cast<unsigned char>(c);
  // The cleanups run on their own thread so that one stuck behind a hung simulation cannot
  // keep the process alive: after the bound it ends anyway (the trace then has no End).
  struct Done {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
  };
  auto done = std::make_shared<Done>();
  try {
    std::thread([done, sig] {
      runAll("signal " + signalName(sig));
      std::lock_guard<std::mutex> lock(done->mutex);
      done->done = true;
      done->cv.notify_all();
    }).detach();
    std::unique_lock<std::mutex> lock(done->mutex);
    done->cv.wait_for(lock, std::chrono::seconds(kSignalCleanupSeconds), [&] { return done->done; });
  } catch (const std::exception&) {
  }
  dieBy(sig);
}

void installSignalHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pipe2(g_pipe, O_CLOEXEC) != 0) return;
    g_signal_owner = ::getpid();
    // The watcher blocks the signals, so that it never runs the handler itself (its read
    // is never interrupted into the handler's pipe write).
    sigset_t block, old;
    sigemptyset(&block);
    for (int sig : kSignals) sigaddset(&block, sig);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    try {
      std::thread(watch).detach();
    } catch (const std::system_error&) {
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      return;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    // Only signals still at their default action: a program's own handlers stay its own.
    for (int sig : kSignals) {
      struct sigaction current {};
      if (::sigaction(sig, nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
          (current.sa_flags & SA_SIGINFO))
        continue;
      struct sigaction act {};
      act.sa_handler = onSignal;
      sigemptyset(&act.sa_mask);
      for (int other : kSignals) sigaddset(&act.sa_mask, other);
      ::sigaction(sig, &act, nullptr);
    }
  });
}

}  // namespace

void onExit(Cleanup fn) {
  installSignalHandlers();
  auto entry = std::make_shared<Entry>();
  entry->fn = std::move(fn);
  entry->owner = ::getpid();
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().entries.push_back(entry);
  }
  // Its own atexit entry, registered now: at a normal exit it runs before what was started
  // before it stops. The entry is kept alive by the registry, which is never destroyed.
  static std::mutex atexit_mutex;
  static std::vector<std::shared_ptr<Entry>>* pending = new std::vector<std::shared_ptr<Entry>>;
  {
    std::lock_guard<std::mutex> lock(atexit_mutex);
    pending->push_back(entry);
  }
  std::atexit([] {
    std::shared_ptr<Entry> e;
    {
      std::lock_guard<std::mutex> lock(atexit_mutex);
      if (pending->empty()) return;
      e = pending->back();   // atexit runs newest first, as the entries were pushed
      pending->pop_back();
    }
    runEntry(e, "exit");
  });
}

void unlinkOnSignal(const std::string& path) {
  installSignalHandlers();
  if (path.size() >= sizeof g_paths[0]) return;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  const int n = g_path_count.load();
  if (n >= kMaxPaths) return;
  std::memcpy(g_paths[n], path.c_str(), path.size() + 1);
  g_path_count.store(n + 1);   // published after the bytes
}

void runAll(const std::string& reason) {
  std::vector<std::shared_ptr<Entry>> entries;
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    entries = registry().entries;
  }
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) runEntry(*it, reason);
}

}  // namespace cardsim::shim::process_exit

namespace cardsim::shim {

void runExitCleanups(const std::string& reason) { process_exit::runAll(reason); }

}  // namespace cardsim::shim
