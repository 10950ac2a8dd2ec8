#include "TraceBackend.h"

#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include <google/protobuf/text_format.h>

#include "ProcessExit.h"
#include "TraceRecorder.h"
#include "cardsim/trace.h"
#include "simulator/Config.h"
#include "simulator/Simulator.h"
#include "simulator/proto/config.pb.h"
#include "traces/lib/TraceError.h"
#include "traces/lib/TraceFormat.h"

extern char** environ;

namespace cardsim::shim {

// A recorded CREATE's flags are these, as the trace format reads them.
static_assert(kEventDisableTiming == trace::kEventFlagDisableTiming && kEventRuntimeMarker == trace::kEventFlagRuntimeMarker,
              "the trace format's event flags are the shim's");

namespace {


// The program's setActivityRecording, also before a TraceBackend existed.
std::atomic<bool> g_user_recording{false};


int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return end && *end == '\0' ? static_cast<int>(x) : fallback;
}


Status makeDirectories(const std::string& dir) {
  std::string partial;
  for (std::size_t i = 0; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    partial = dir.substr(0, i);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      return Status(Code::InvalidValue, "trace directory " + dir + ": cannot create " + partial + ": " +
                                            std::strerror(errno));
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Status(Code::InvalidValue, "trace directory " + dir + " is not a directory");
  return Status::Ok();
}

std::string commandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && s.back() == '\0') s.pop_back();
  for (char& c : s)
    if (c == '\0') c = ' ';
  return s;
}

// The resolved preset, as the simulator loaded it: the preset, then the overrides file,
// then the overrides.
std::string resolvedConfig(const sim::SimOptions& o) {
  try {
    config::Preset preset = sim::loadPreset(o.preset);
    if (!o.overrides_file.empty()) sim::applyOverridesFile(preset, o.overrides_file);
    for (const std::string& ov : o.overrides) sim::applyOverride(preset, ov, "override \"" + ov + "\"");
    std::string text;
    google::protobuf::TextFormat::PrintToString(preset, &text);
    return text;
  } catch (const std::exception& e) {
    return std::string("# could not resolve the preset: ") + e.what() + "\n";
  }
}

}  // namespace

namespace {
// The process's one tracing backend, for the cheap traceRecording() check; operand shapes
// for the next kernel launch, per thread (traceNextKernelShapes).
std::atomic<TraceBackend*> g_tracing{nullptr};
thread_local std::vector<std::vector<int64_t>> t_next_shapes;
thread_local uint32_t t_next_outputs = 0;
}  // namespace

TraceBackend::TraceBackend(std::unique_ptr<IBackend> inner, InitOptions options)
    : inner_(std::move(inner)), options_(std::move(options)), user_recording_(g_user_recording.load()) {
  g_tracing.store(this, std::memory_order_release);
}

std::vector<std::vector<int64_t>> TraceBackend::takeNextKernelShapes(uint32_t* outputs) {
  std::vector<std::vector<int64_t>> s;
  s.swap(t_next_shapes);
  *outputs = t_next_outputs;
  t_next_outputs = 0;
  return s;
}

TraceBackend::~TraceBackend() {
  TraceBackend* self = this;
  g_tracing.compare_exchange_strong(self, nullptr);
  // A forked child that ends with static destructors must not flush the parent's buffered
  // records into the parent's file: the copy is dropped, unwritten.
  if (recorder_ && ::getpid() != owner_pid_) (void)recorder_.release();
}

// ---- recording control ----------------------------------------------------------------

trace::Header TraceBackend::header(const char* started_by) {
  trace::Header h;
  h.set_cardsim_version(CARDSIM_VERSION);
  h.set_backend(inner_->name());
  h.set_execution_mode(options_.execution.empty() ? "full" : options_.execution);
  h.set_started_by(started_by);
  if (sim::Simulator* s = sim::Simulator::running()) {
    const sim::SimOptions& o = s->options();
    // A replay as recorded runs the recording's resolved preset from a file of its own: its
    // trace names the recording's preset (config_text holds the configuration either way).
    const char* replayed = std::getenv("CARDSIM_REPLAY_PRESET");
    h.set_preset(replayed && *replayed ? replayed : o.preset);
    h.set_devices(s->deviceCount());
    h.set_device_name(s->params().name);
    for (const std::string& ov : o.overrides) h.add_overrides(ov);
    h.set_overrides_file(o.overrides_file);
    h.set_config_text(resolvedConfig(o));
  } else {
    // No model (a vendor runtime): the preset the run stands for and the real devices, so
    // that a what-if can start from a real card's trace.
    int n = 0;
    DeviceProperties p;
    if (inner_->getDeviceCount(&n).ok() && n > 0 && inner_->getDeviceProperties(&p, 0).ok()) {
      h.set_devices(static_cast<uint32_t>(n));
      h.set_device_name(p.name);
      h.set_preset(p.preset);
      sim::SimOptions o;
      o.preset = p.preset;
      o.devices = static_cast<uint32_t>(n);
      h.set_config_text(resolvedConfig(o));
    }
  }
  h.set_rank(envInt("RANK", 0));
  h.set_world_size(envInt("WORLD_SIZE", 1));
  h.set_replicated(envInt("CARDSIM_REPLAY_REPLICATED", 0) == 1);
  h.set_local_rank(envInt("LOCAL_RANK", -1));
  trace::HostInfo* host = h.mutable_host();
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) host->set_hostname(name);
  struct utsname u {};
  if (::uname(&u) == 0) host->set_os(std::string(u.sysname) + " " + u.release + " " + u.machine);
  host->set_cpus(static_cast<uint32_t>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN))));
  host->set_pid(static_cast<uint64_t>(::getpid()));
  host->set_command(commandLine());
  h.set_created_unix_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count());
  static const char* const kAlso[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                      "MLU_VISIBLE_DEVICES", "SUPA_VISIBLE_DEVICES"};
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (!eq) continue;
    const std::string key(*e, static_cast<std::size_t>(eq - *e));
    bool keep = key.rfind("CARDSIM_", 0) == 0;
    for (const char* k : kAlso) keep = keep || key == k;
    if (keep) (*h.mutable_environment())[key] = eq + 1;
  }
  return h;
}

// This process's file in a trace directory: rank<RANK>.<ext>.
std::string TraceBackend::rankFile(const std::string& directory) {
  return directory + "/rank" + std::to_string(envInt("RANK", 0)) + trace::kFileExtension;
}

Status TraceBackend::openLocked(const std::string& directory, const char* started_by,
                                const std::string& compression, TraceObserver* observer) {
  trace::Compression how;
  try {   // a bad value is refused before anything is created
    how = compression.empty() ? trace::compressionFromEnvironment()
                              : trace::parseCompression(compression, "traceStart compression");
  } catch (const std::exception& e) {
    return Status(Code::InvalidValue, e.what());
  }
  const bool file = !directory.empty();   // else an observer only
  if (file)
    if (Status st = makeDirectories(directory); !st.ok()) return st;
  const std::string path = file ? rankFile(directory) : std::string();
  // A file of an earlier recording of this process is kept (another run's is replaced).
  if (file) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && written_.count({st.st_dev, st.st_ino}))
      return Status(Code::InvalidValue, "traceStart: " + path +
                                            " holds an earlier recording of this process, which this one would "
                                            "replace; record into another directory");
  }
  try {
    recorder_ = std::make_unique<TraceRecorder>(path, header(started_by), how, observer);
    struct stat st {};
    if (file && ::stat(path.c_str(), &st) == 0) written_.insert({st.st_dev, st.st_ino});
  } catch (const std::exception& e) {
    return Status(Code::InvalidValue, e.what());
  }
  // The program's own activity records, if it collects them, stay its own: hand them over
  // before the trace starts taking completions.
  if (user_recording_) (void)inner_->drainActivities(&user_pending_);
  (void)inner_->setActivityRecording(true);
  calls_since_drain_ = 0;
  owner_pid_ = ::getpid();
  hooked_ = true;
  // The end of the process completes the file, however it ends (ProcessExit.h). Registered
  // after the simulator started, so at exit this runs before it stops.
  static std::once_flag at_exit;
  static TraceBackend* self = nullptr;
  self = this;
  std::call_once(at_exit, [] {
    process_exit::onExit([](const std::string& reason) {
      if (self && self->active(nullptr)) (void)self->stop(reason);
    });
  });
  return Status::Ok();
}

void TraceBackend::arm(const std::string& directory) {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_directory_ = directory;
  hooked_ = true;
}

Status TraceBackend::start(const std::string& directory, const std::string& compression, TraceObserver* observer) {
  if (directory.empty() && !observer) return Status(Code::InvalidValue, "traceStart: the directory is empty");
  std::lock_guard<std::mutex> lock(mutex_);
  if (recorder_)
    return Status(Code::InvalidValue, "traceStart: a trace is already being recorded" +
                                          (recorder_->path().empty() ? std::string(" (to an observer)")
                                                                     : " into " + recorder_->path()));
  if (!armed_directory_.empty())
    return Status(Code::InvalidValue, "traceStart: CARDSIM_TRACE=" + armed_directory_ +
                                          " already records this process");
  // A capture's begin before the recording (or its end after it) would be missing from the
  // file, which then could not replay: refused, as nothing has been written yet.
  if (std::string capture = inner_->captureInProgress(); !capture.empty())
    return Status(Code::InvalidValue, "traceStart: " + capture +
                                          " is capturing a graph; start the recording before the capture "
                                          "begins or after it ends");
  // Work the program queued before its recording starts would hold the recorded commands
  // back, and a replay starts from idle cards: it is waited for first, unrecorded, so that the
  // recording replays to its own times. (A tool's observer starts on idle cards already.)
  if (!observer) (void)inner_->waitForQueuedWork();
  return openLocked(directory, "api", compression, observer);
}

bool TraceBackend::active(std::string* path) {
  std::lock_guard<std::mutex> lock(mutex_);
  // CARDSIM_TRACE records the process from its first call that does something on a card:
  // before it, the file it will write.
  const bool armed = !recorder_ && !armed_directory_.empty();
  if (path) *path = recorder_ ? recorder_->path() : armed ? rankFile(armed_directory_) : std::string();
  return recorder_ != nullptr || armed;
}

void TraceBackend::synchronizeUsedLocked() {
  int current = 0;
  const bool restore = inner_->getDevice(&current).ok();
  for (int d : recorder_->devicesUsed()) {
    // Synchronizing a device would invalidate a capture in progress on it.
    bool capturing = false;
    for (const auto& [stream, device] : capturing_) capturing = capturing || device == d;
    if (capturing || !inner_->setDevice(d).ok()) continue;
    (void)inner_->deviceSynchronize();
  }
  if (restore) (void)inner_->setDevice(current);
}

void TraceBackend::drainLocked() {
  scratch_.clear();
  if (!inner_->drainActivities(&scratch_).ok()) return;
  if (user_recording_) user_pending_.insert(user_pending_.end(), scratch_.begin(), scratch_.end());
  recorder_->addCommands(scratch_);
  calls_since_drain_ = 0;
}

void TraceBackend::failLocked(const std::string& what) {
  std::fprintf(stderr, "cardsim: trace recording stopped: %s\n", what.c_str());
  recorder_.reset();   // flushes what it holds; the file has no End: readers say incomplete
  armed_directory_.clear();
  hooked_ = false;
  (void)inner_->setActivityRecording(user_recording_);
}

Status TraceBackend::stop(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recorder_) {
    if (!armed_directory_.empty()) {   // armed but nothing was done on a card: no file
      armed_directory_.clear();
      hooked_ = false;
      return Status::Ok();
    }
    return Status(Code::InvalidValue, "traceStop: no trace is being recorded");
  }
  // The program's own stop inside a capture is refused (the recording goes on); the end of
  // the process completes the file whatever it finds.
  if (reason == "stop")
    if (std::string capture = inner_->captureInProgress(); !capture.empty())
      return Status(Code::InvalidValue, "traceStop: " + capture +
                                            " is capturing a graph; stop the recording after the capture ends "
                                            "(the recording goes on)");
  hooked_ = false;
  try {
    synchronizeUsedLocked();
    drainLocked();
    recorder_->finish(reason, fabric_job_);
  } catch (const std::exception& e) {
    const std::string path = recorder_->path();
    failLocked(e.what());
    return Status(Code::Internal, "traceStop: " + path + ": " + e.what());
  }
  recorder_.reset();
  armed_directory_.clear();
  (void)inner_->setActivityRecording(user_recording_);
  return Status::Ok();
}


Status TraceBackend::fabricConnect(const std::string& address, const std::string& job, int rank, int world_size,
                                   double connect_timeout_s) {
  Status st = inner_->fabricConnect(address, job, rank, world_size, connect_timeout_s);
  if (st.ok()) {
    std::lock_guard<std::mutex> lock(mutex_);
    fabric_job_ = job;
  }
  return st;
}

Status TraceBackend::setActivityRecording(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  user_recording_ = on;
  if (recorder_) return Status::Ok();   // the trace keeps the backend recording
  return inner_->setActivityRecording(on);
}

Status TraceBackend::drainActivities(std::vector<ActivityRecord>* out) {
  if (!out) return inner_->drainActivities(out);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recorder_) {
    out->insert(out->end(), user_pending_.begin(), user_pending_.end());
    user_pending_.clear();
    return inner_->drainActivities(out);
  }
  try {
    drainLocked();
  } catch (const std::exception& e) {
    failLocked(e.what());
  }
  out->insert(out->end(), user_pending_.begin(), user_pending_.end());
  user_pending_.clear();
  return Status::Ok();
}

// ---- installing the wrapper and the public functions ----------------------------------

void noteActivityRecording(bool on) { g_user_recording = on; }

std::unique_ptr<IBackend> wrapForTracing(std::unique_ptr<IBackend> backend, const InitOptions& options) {
  const char* dir = std::getenv("CARDSIM_TRACE");
  if (!dir || !*dir) return backend;
  auto t = std::make_unique<TraceBackend>(std::move(backend), options);
  t->arm(dir);
  return t;
}

Status traceStart(const std::string& directory, const std::string& compression) {
  Status why;
  TraceBackend* t = tracingBackend(&why);
  return t ? t->start(directory, compression) : why;
}

Status traceStartObserved(const std::string& directory, TraceObserver* observer, const std::string& compression) {
  if (!observer) return Status(Code::InvalidValue, "traceStartObserved: no observer");
  Status why;
  TraceBackend* t = tracingBackend(&why);
  return t ? t->start(directory, compression, observer) : why;
}

Status traceStop() {
  Status why;
  TraceBackend* t = tracingBackend(&why);
  return t ? t->stop("stop") : why;
}

void traceThisThread(bool recorded) { TraceBackend::t_trace_paused = !recorded; }

bool traceRecording() {
  const TraceBackend* t = g_tracing.load(std::memory_order_acquire);
  return t && t->hooked();
}

void traceNextKernelShapes(std::vector<std::vector<int64_t>> shapes, uint32_t outputs) {
  if (!traceRecording()) return;
  t_next_outputs = std::min<uint32_t>(outputs, static_cast<uint32_t>(shapes.size()));
  t_next_shapes = std::move(shapes);
}

bool traceActive(std::string* path) {
  Status why;
  TraceBackend* t = tracingBackend(&why);
  if (!t) {
    if (path) path->clear();
    return false;
  }
  return t->active(path);
}

}  // namespace cardsim::shim

namespace {
int reply(const cardsim::shim::Status& st, char* error, std::size_t size) {
  if (error && size > 0) std::snprintf(error, size, "%s", st.ok() ? "" : st.message().c_str());
  return static_cast<int>(st.code());
}
}  // namespace

extern "C" int cardsim_trace_start(const char* directory, char* error, std::size_t error_size) {
  return reply(cardsim::shim::traceStart(directory ? directory : ""), error, error_size);
}

extern "C" int cardsim_trace_start_compressed(const char* directory, const char* compression, char* error,
                                              std::size_t error_size) {
  return reply(cardsim::shim::traceStart(directory ? directory : "", compression ? compression : ""), error,
               error_size);
}

extern "C" int cardsim_trace_stop(char* error, std::size_t error_size) {
  return reply(cardsim::shim::traceStop(), error, error_size);
}

extern "C" int cardsim_trace_active(char* path, std::size_t path_size) {
  std::string p;
  const bool on = cardsim::shim::traceActive(&p);
  if (path && path_size > 0) std::snprintf(path, path_size, "%s", p.c_str());
  return on ? 1 : 0;
}
