// The public shim functions: pick the backend once per process, forward, and keep the
// thread's last error.
#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "AsyncChecker.h"
#include "Backend.h"
#include "HostAccessGuard.h"
#include "StatusBoard.h"
#include "TraceBackend.h"

namespace cardsim::shim {
namespace {

struct BackendEntry {
  const char* name;
  std::unique_ptr<IBackend> (*create)(const InitOptions&, Status*);
};

// auto: the vendor runtime when it loads, has every symbol and reports a device; otherwise
// the emulator, saying why on stderr (once per process).
std::unique_ptr<IBackend> createAutoBackend(const InitOptions& options, Status* why) {
  Status native_why;
  if (auto b = createNativeBackend(options, &native_why)) return b;
  std::fprintf(stderr, "cardsim: CARDSIM_BACKEND=auto: %s; using the emulator (sim)\n",
               native_why.message().c_str());
  return createSimBackend(options, why);
}

// The registry of backends, keyed by CARDSIM_BACKEND.
const BackendEntry kBackends[] = {
    {"sim", &createSimBackend},
    {"native", &createNativeBackend},
    {"auto", &createAutoBackend},
};

std::mutex g_mutex;
std::unique_ptr<IBackend> g_backend;
// g_backend's pointer for calls once it exists, read without g_mutex (every shim call reads
// it; a lock per call cost a few percent of a replay). Set under g_mutex whenever g_backend
// changes; a backend it pointed to lives on (inside the TraceBackend that wraps it).
std::atomic<IBackend*> g_current{nullptr};
// Whether runtime calls tell the backend when they begin and return (measured host time).
std::atomic<bool> g_call_scopes{false};
// Set in a child forked after initialization: the simulation thread stayed in the parent.
std::atomic<bool> g_forked_child{false};
InitOptions g_options;
thread_local Status t_last_error;

Status remember(Status s) {
  if (!s.ok() && s.code() != Code::NotReady) t_last_error = s;
  return s;
}

Status initLocked(const InitOptions& in) {
  InitOptions options = in;
  if (options.execution.empty()) {
    const char* env = std::getenv("CARDSIM_EXECUTION");
    options.execution = env && *env ? env : "full";
  }
  if (options.execution != "full" && options.execution != "timing")
    return Status(Code::InitFailed, "CARDSIM_EXECUTION: unknown execution mode \"" + options.execution +
                                        "\" (valid: full, timing)");
  if (!options.move_data && options.execution != "timing")
    return Status(Code::InitFailed, "initialize: move_data=false needs timing execution (got \"" +
                                        options.execution + "\"): full execution computes with the data");
  std::string name = options.backend;
  if (name.empty()) {
    const char* env = std::getenv("CARDSIM_BACKEND");
    name = env && *env ? env : "sim";
  }
  for (const BackendEntry& e : kBackends) {
    if (name != e.name) continue;
    Status why;
    g_backend = e.create(options, &why);
    if (!g_backend) return why;
    g_backend = wrapForTracing(std::move(g_backend), options);   // CARDSIM_TRACE
    g_current.store(g_backend.get(), std::memory_order_release);
    g_call_scopes.store(g_backend->measuresHostCalls(), std::memory_order_relaxed);
    if (options.status_board) StatusBoard::startForProcess(g_backend.get());
    static std::once_flag at_fork;
    std::call_once(at_fork, [] { pthread_atfork(nullptr, nullptr, [] { g_forked_child = true; }); });
    g_options = options;
    g_options.backend = name;
    return Status::Ok();
  }
  std::string valid;
  for (const BackendEntry& e : kBackends) valid += (valid.empty() ? "" : ", ") + std::string(e.name);
  return Status(Code::InitFailed, "unknown backend \"" + name + "\" (valid backends: " + valid + ")");
}

Status forkedChildError() {
  return Status(Code::InitFailed,
                "the runtime was initialized before this process was forked; a forked child "
                "cannot use the devices (start workers with the 'spawn' method, or initialize "
                "after forking)");
}

IBackend* backend(Status* why) {
  if (g_forked_child.load(std::memory_order_relaxed)) {
    *why = forkedChildError();
    return nullptr;
  }
  if (IBackend* b = g_current.load(std::memory_order_acquire)) return b;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_backend) {
    Status s = initLocked(InitOptions{});
    if (!s.ok()) {
      *why = s;
      return nullptr;
    }
  }
  return g_backend.get();
}

// The outermost runtime call of a thread, begun and returned (measured host time counts the
// time between calls: the program's own work, not the runtime's).
thread_local int t_call_depth = 0;
class CallScope {
 public:
  explicit CallScope(IBackend* b) : b_(g_call_scopes.load(std::memory_order_relaxed) ? b : nullptr) {
    if (b_ && t_call_depth++ == 0) b_->hostCallBegins();
  }
  ~CallScope() {
    if (b_ && --t_call_depth == 0) b_->hostCallReturns();
  }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  IBackend* b_;
};

#define CARDSIM_FORWARD(call)          \
  do {                                 \
    Status why_;                       \
    IBackend* b_ = backend(&why_);     \
    if (!b_) return remember(why_);    \
    CallScope scope_(b_);              \
    return remember(b_->call);         \
  } while (0)

// CARDSIM_CHECK=async (shim.h): the checker hears of every ordering call after it succeeds.
AsyncChecker g_checker;
std::atomic<bool> g_check_on{false};

AsyncChecker::StreamRef refOf(IBackend* b, Stream s) {
  AsyncChecker::StreamRef r;
  int dev = 0;
  if (s) (void)b->streamGetDevice(s, &dev);
  else (void)b->getDevice(&dev);
  r.device = dev;
  r.key = AsyncChecker::keyOf(s, dev);
  (void)b->streamGetId(s, &r.id);
  return r;
}

#define CARDSIM_FORWARD_CHECKED(call, hook)                                     \
  do {                                                                          \
    Status why_;                                                                \
    IBackend* b_ = backend(&why_);                                              \
    if (!b_) return remember(why_);                                             \
    CallScope scope_(b_);                                                       \
    const uint64_t site_ = checkCurrentSite();                                  \
    Status s_ = b_->call;                                                       \
    if (s_.ok() && g_check_on.load(std::memory_order_relaxed)) {                \
      checkSetSite(site_); /* the call may have run framework code (replays) */ \
      hook;                                                                     \
    }                                                                           \
    return remember(s_);                                                        \
  } while (0)

}  // namespace

// traceStart: the backend moves into a TraceBackend, once. A thread already inside a call
// on the bare backend finishes it there (it lives on inside the wrapper), unrecorded.
TraceBackend* tracingBackend(Status* why) {
  if (!backend(why)) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto* t = dynamic_cast<TraceBackend*>(g_backend.get())) return t;
  auto t = std::make_unique<TraceBackend>(std::move(g_backend), g_options);
  TraceBackend* raw = t.get();
  g_backend = std::move(t);
  g_current.store(raw, std::memory_order_release);
  return raw;
}

const char* codeName(Code c) {
  switch (c) {
    case Code::Success: return "Success";
    case Code::NotReady: return "NotReady";
    case Code::InvalidValue: return "InvalidValue";
    case Code::InvalidDevice: return "InvalidDevice";
    case Code::InvalidHandle: return "InvalidHandle";
    case Code::OutOfMemory: return "OutOfMemory";
    case Code::NotSupported: return "NotSupported";
    case Code::InitFailed: return "InitFailed";
    case Code::KernelFailed: return "KernelFailed";
    case Code::Internal: return "Internal";
    case Code::CommFailed: return "CommFailed";
    case Code::TimeOverflow: return "TimeOverflow";
  }
  return "Unknown";
}

std::string Status::toString() const {
  return message_.empty() ? codeName(code_) : std::string(codeName(code_)) + ": " + message_;
}

Status getLastError() {
  Status s = t_last_error;
  t_last_error = Status::Ok();
  return s;
}

const char* executionModeName(ExecutionMode m) { return m == ExecutionMode::Timing ? "timing" : "full"; }

Status getExecutionMode(ExecutionMode* mode) {
  if (!mode) return remember(Status(Code::InvalidValue, "getExecutionMode: 'mode' is null"));
  Status why;
  if (!backend(&why)) return remember(why);
  *mode = g_options.execution == "timing" ? ExecutionMode::Timing : ExecutionMode::Full;
  return Status::Ok();
}

Status initialize(const InitOptions& options) {
  if (g_forked_child.load()) return remember(forkedChildError());
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_backend) {
    const bool same = (options.backend.empty() || options.backend == g_options.backend) &&
                      (options.execution.empty() || options.execution == g_options.execution) &&
                      options.preset == g_options.preset && options.devices == g_options.devices &&
                      options.overrides == g_options.overrides &&
                      options.overrides_file == g_options.overrides_file;
    if (same) return Status::Ok();
    return remember(Status(Code::InitFailed,
                           "initialize: the runtime is already running (backend \"" +
                               g_options.backend + "\"); one configuration per process"));
  }
  return remember(initLocked(options));
}

std::vector<std::string> backendNames() {
  std::vector<std::string> out;
  for (const BackendEntry& e : kBackends) out.emplace_back(e.name);
  return out;
}

std::string backendName() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_backend ? g_backend->name() : "";
}

const char* activityKindName(ActivityRecord::Kind k) {
  switch (k) {
    case ActivityRecord::Kind::Kernel: return "kernel";
    case ActivityRecord::Kind::MemcpyHtoD: return "memcpy HtoD";
    case ActivityRecord::Kind::MemcpyDtoH: return "memcpy DtoH";
    case ActivityRecord::Kind::MemcpyDtoD: return "memcpy DtoD";
    case ActivityRecord::Kind::MemcpyPeer: return "memcpy peer";
    case ActivityRecord::Kind::Memset: return "memset";
    case ActivityRecord::Kind::EventRecord: return "event record";
    case ActivityRecord::Kind::EventWait: return "event wait";
    case ActivityRecord::Kind::Collective: return "collective";
  }
  return "?";
}

Status getDeviceCount(int* count) { CARDSIM_FORWARD(getDeviceCount(count)); }
Status setDevice(int device) { CARDSIM_FORWARD(setDevice(device)); }
Status getDevice(int* device) { CARDSIM_FORWARD(getDevice(device)); }
Status getDeviceProperties(DeviceProperties* props, int device) {
  CARDSIM_FORWARD(getDeviceProperties(props, device));
}
Status deviceSynchronize() {
  CARDSIM_FORWARD_CHECKED(deviceSynchronize(), {
    int dev = 0;
    (void)b_->getDevice(&dev);
    g_checker.hostWaitedDevice(dev);
  });
}
Status deviceCanAccessPeer(int* can_access, int device, int peer) {
  CARDSIM_FORWARD(deviceCanAccessPeer(can_access, device, peer));
}
// Memory in use shows on the status board (StatusBoard.h).
Status malloc(void** ptr, std::size_t bytes) {
  return StatusBoard::afterMemoryCall([&] { CARDSIM_FORWARD(malloc(ptr, bytes)); }());
}
Status free(void* ptr) {
  return StatusBoard::afterMemoryCall([&] { CARDSIM_FORWARD(free(ptr)); }());
}
Status memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  CARDSIM_FORWARD(memGetInfo(free_bytes, total_bytes));
}
Status hostMalloc(void** ptr, std::size_t bytes) { CARDSIM_FORWARD(hostMalloc(ptr, bytes)); }
Status hostFree(void* ptr) { CARDSIM_FORWARD(hostFree(ptr)); }
Status hostRegister(void* ptr, std::size_t bytes) { CARDSIM_FORWARD(hostRegister(ptr, bytes)); }
Status hostUnregister(void* ptr) { CARDSIM_FORWARD(hostUnregister(ptr)); }
Status pointerGetAttributes(PointerAttributes* attrs, const void* ptr) {
  CARDSIM_FORWARD(pointerGetAttributes(attrs, ptr));
}
namespace {
thread_local uint64_t t_correlation = 0;
}  // namespace
void setCorrelationId(uint64_t id) { t_correlation = id; }
uint64_t currentCorrelationId() { return t_correlation; }

Status timingNoteHostWrite(const void* dev_ptr, std::size_t bytes) {
  CARDSIM_FORWARD(timingNoteHostWrite(dev_ptr, bytes));
}
Status timingScrub(void* dev_ptr, std::size_t bytes) {
  HostAccessGuard::Window window;   // the runtime's own access to device memory
  CARDSIM_FORWARD(timingScrub(dev_ptr, bytes));
}
Status memset(void* dev_ptr, int value, std::size_t bytes) {
  HostAccessGuard::Window window;   // the runtime's own access to device memory
  CARDSIM_FORWARD_CHECKED(memset(dev_ptr, value, bytes, nullptr, false),
                          g_checker.memsetQueued(refOf(b_, nullptr), dev_ptr, bytes, false));
}
Status memsetAsync(void* dev_ptr, int value, std::size_t bytes, Stream stream) {
  HostAccessGuard::Window window;   // the runtime's own access to device memory
  CARDSIM_FORWARD_CHECKED(memset(dev_ptr, value, bytes, stream, true),
                          g_checker.memsetQueued(refOf(b_, stream), dev_ptr, bytes, true));
}
Status memcpy(void* dst, const void* src, std::size_t bytes, MemcpyKind kind) {
  HostAccessGuard::Window window;   // the runtime's own access to device memory
  CARDSIM_FORWARD_CHECKED(memcpy(dst, src, bytes, kind, nullptr, false),
                          g_checker.copyQueued(refOf(b_, nullptr), dst, src, bytes, kind, false));
}
Status memcpyAsync(void* dst, const void* src, std::size_t bytes, MemcpyKind kind, Stream stream) {
  HostAccessGuard::Window window;   // the runtime's own access to device memory
  CARDSIM_FORWARD_CHECKED(memcpy(dst, src, bytes, kind, stream, true),
                          g_checker.copyQueued(refOf(b_, stream), dst, src, bytes, kind, true));
}
Status memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                       std::size_t bytes, Stream stream) {
  HostAccessGuard::Window window;   // the runtime's own access to device memory
  CARDSIM_FORWARD_CHECKED(memcpyPeerAsync(dst, dst_device, src, src_device, bytes, stream),
                          g_checker.copyQueued(refOf(b_, stream), dst, src, bytes, MemcpyKind::DeviceToDevice, true));
}
Status streamCreate(Stream* stream, int priority) { CARDSIM_FORWARD(streamCreate(stream, priority)); }
Status streamDestroy(Stream stream) { CARDSIM_FORWARD(streamDestroy(stream)); }
Status streamSynchronize(Stream stream) {
  CARDSIM_FORWARD_CHECKED(streamSynchronize(stream), g_checker.hostWaitedStream(refOf(b_, stream)));
}
Status streamQuery(Stream stream) {
  CARDSIM_FORWARD_CHECKED(streamQuery(stream), g_checker.hostWaitedStream(refOf(b_, stream)));
}
Status streamGetPriority(Stream stream, int* priority) {
  CARDSIM_FORWARD(streamGetPriority(stream, priority));
}
Status streamGetDevice(Stream stream, int* device) { CARDSIM_FORWARD(streamGetDevice(stream, device)); }
Status streamGetId(Stream stream, uint32_t* id) { CARDSIM_FORWARD(streamGetId(stream, id)); }
Status streamWaitEvent(Stream stream, Event event) {
  CARDSIM_FORWARD_CHECKED(streamWaitEvent(stream, event), g_checker.streamWaited(refOf(b_, stream), event));
}
Status deviceGetStreamPriorityRange(int* least, int* greatest) {
  CARDSIM_FORWARD(deviceGetStreamPriorityRange(least, greatest));
}
Status eventCreate(Event* event, unsigned flags) { CARDSIM_FORWARD(eventCreate(event, flags)); }
Status eventDestroy(Event event) {
  CARDSIM_FORWARD_CHECKED(eventDestroy(event), g_checker.eventDestroyed(event));
}
Status eventRecord(Event event, Stream stream) {
  CARDSIM_FORWARD_CHECKED(eventRecord(event, stream), g_checker.eventRecorded(event, refOf(b_, stream)));
}
Status eventQuery(Event event) { CARDSIM_FORWARD_CHECKED(eventQuery(event), g_checker.hostWaitedEvent(event)); }
Status eventSynchronize(Event event) {
  CARDSIM_FORWARD_CHECKED(eventSynchronize(event), g_checker.hostWaitedEvent(event));
}
Status eventElapsedTime(float* ms, Event start, Event end) {
  CARDSIM_FORWARD(eventElapsedTime(ms, start, end));
}
Status launchKernel(Stream stream, std::string_view name, const KernelCost& cost,
                    const std::function<void()>& work) {
  HostAccessGuard::Window window(static_cast<bool>(work));   // the kernel's host work, if any
  CARDSIM_FORWARD(launchKernel(stream, name, cost, work));
}
Status launchCollective(Stream stream, std::string_view name, double seconds) {
  CARDSIM_FORWARD(launchCollective(stream, name, seconds));
}
Status launchFabricCollective(Stream stream, const CollectiveDesc& desc, double* seconds,
                              std::string* algorithm) {
  CARDSIM_FORWARD(launchFabricCollective(stream, desc, seconds, algorithm));
}
Status fabricServe(const std::string& bind, uint16_t port, uint16_t* bound_port, std::string* local_address) {
  CARDSIM_FORWARD(fabricServe(bind, port, bound_port, local_address));
}
Status fabricConnect(const std::string& address, const std::string& job, int rank, int world_size,
                     double connect_timeout_s) {
  CARDSIM_FORWARD(fabricConnect(address, job, rank, world_size, connect_timeout_s));
}
Status fabricAddress(std::string* address) { CARDSIM_FORWARD(fabricAddress(address)); }
Status fabricPark(bool parked) { CARDSIM_FORWARD(fabricPark(parked)); }
Status fabricGone(const std::vector<int>& ranks, double timeout_s, std::vector<std::pair<int, std::string>>* gone) {
  CARDSIM_FORWARD(fabricGone(ranks, timeout_s, gone));
}
Status fabricDisconnect() { CARDSIM_FORWARD(fabricDisconnect()); }
Status fabricSettle() { CARDSIM_FORWARD(fabricSettle()); }
Status commGetUniqueId(std::string* id) { CARDSIM_FORWARD(commGetUniqueId(id)); }
Status commInitRank(Comm* comm, int nranks, const std::string& id, int rank) {
  CARDSIM_FORWARD(commInitRank(comm, nranks, id, rank));
}
Status commDestroy(Comm comm) { CARDSIM_FORWARD(commDestroy(comm)); }
Status commLaunch(const CommCall& call, Comm comm, Stream stream) {
  CARDSIM_FORWARD(commLaunch(call, comm, stream));
}
Status commGroupStart() { CARDSIM_FORWARD(commGroup(true)); }
Status commGroupEnd() { CARDSIM_FORWARD(commGroup(false)); }
Status launchHostFunc(Stream stream, std::function<void()> fn) {
  HostAccessGuard::Window window;   // the runtime's own access to device memory
  CARDSIM_FORWARD(launchHostFunc(stream, std::move(fn)));
}
Status streamBeginCapture(Stream stream) { return streamBeginCapture(stream, CaptureMode::Global); }
Status streamBeginCapture(Stream stream, CaptureMode mode) {
  CARDSIM_FORWARD_CHECKED(streamBeginCapture(stream, mode), g_checker.captureBegun(refOf(b_, stream)));
}
namespace {
thread_local CaptureMode t_capture_mode = CaptureMode::Global;
}  // namespace
CaptureMode threadCaptureMode() { return t_capture_mode; }
Status threadExchangeCaptureMode(CaptureMode* mode) {
  if (!mode) return remember(Status(Code::InvalidValue, "threadExchangeCaptureMode: 'mode' is null"));
  std::swap(*mode, t_capture_mode);
  return Status::Ok();
}
const char* captureModeName(CaptureMode m) {
  switch (m) {
    case CaptureMode::Global: return "global";
    case CaptureMode::ThreadLocal: return "thread_local";
    case CaptureMode::Relaxed: return "relaxed";
  }
  return "?";
}
Status streamEndCapture(Stream stream, Graph* graph) {
  Status why;
  IBackend* b = backend(&why);
  if (!b) return remember(why);
  Status s = b->streamEndCapture(stream, graph);
  // A failed end (an invalidated capture) ends the capture too.
  if (g_check_on.load(std::memory_order_relaxed)) g_checker.captureEnded(refOf(b, stream), s.ok() ? *graph : nullptr);
  return remember(s);
}
Status streamIsCapturing(Stream stream, bool* capturing) {
  CARDSIM_FORWARD(streamIsCapturing(stream, capturing));
}
Status graphNodeCount(Graph graph, std::size_t* count) { CARDSIM_FORWARD(graphNodeCount(graph, count)); }
Status graphDescribe(Graph graph, std::vector<GraphNodeInfo>* nodes) { CARDSIM_FORWARD(graphDescribe(graph, nodes)); }
Status graphLaunch(Graph graph, Stream stream) {
  HostAccessGuard::Window window;   // the runtime's own access to device memory
  CARDSIM_FORWARD_CHECKED(graphLaunch(graph, stream), g_checker.graphLaunched(graph, refOf(b_, stream)));
}
Status graphDestroy(Graph graph) {
  CARDSIM_FORWARD_CHECKED(graphDestroy(graph), g_checker.graphDestroyed(graph));
}
Status hostTimePs(uint64_t* ps) { CARDSIM_FORWARD(hostTimePs(ps)); }
Status hostClockShareBegin() { CARDSIM_FORWARD(hostClockShareBegin()); }
Status hostClockShareEnd() { CARDSIM_FORWARD(hostClockShareEnd()); }
Status hostClockJoin(uint64_t ps) { CARDSIM_FORWARD(hostClockJoin(ps)); }
Status hostThreadClock(uint64_t* ps, bool* started) { CARDSIM_FORWARD(hostThreadClock(ps, started)); }
Status setActivityRecording(bool on) {
  noteActivityRecording(on);   // a TraceBackend installed later must know
  CARDSIM_FORWARD(setActivityRecording(on));
}
Status drainActivities(std::vector<ActivityRecord>* out) { CARDSIM_FORWARD(drainActivities(out)); }

Status checkEnable(bool on) {   // does not start the runtime: CARDSIM_CHECK is read before it starts
  if (on == g_check_on.load()) return Status::Ok();
  g_checker.reset();   // on: a clean slate; off: nothing kept
  g_check_on.store(on);
  return Status::Ok();
}
Status checkGuardDeviceMemory(bool on) {
  HostAccessGuard::instance().setEnabled(on);
  return Status::Ok();
}
void checkHostWindowOpen() { HostAccessGuard::instance().open(); }
void checkHostWindowClose() { HostAccessGuard::instance().close(); }
bool checkEnabled() { return g_check_on.load(std::memory_order_relaxed); }
Status checkDeviceAccess(Stream stream, const void* dev_ptr, std::size_t bytes, bool write) {
  if (!g_check_on.load(std::memory_order_relaxed) || bytes == 0) return Status::Ok();
  Status why;
  IBackend* b = backend(&why);
  if (!b) return remember(why);
  g_checker.deviceAccess(refOf(b, stream), reinterpret_cast<uintptr_t>(dev_ptr), bytes, write,
                         checkCurrentSite());
  return Status::Ok();
}
Status checkHostAccess(const void* host_ptr, std::size_t bytes, bool write) {
  if (g_check_on.load(std::memory_order_relaxed) && bytes > 0)
    g_checker.hostAccess(reinterpret_cast<uintptr_t>(host_ptr), bytes, write, checkCurrentSite());
  return Status::Ok();
}
Status checkBlockFreed(const void* dev_ptr, std::size_t bytes) {
  if (g_check_on.load(std::memory_order_relaxed)) g_checker.blockFreed(reinterpret_cast<uintptr_t>(dev_ptr), bytes);
  return Status::Ok();
}
std::size_t checkPendingReports() {
  return g_check_on.load(std::memory_order_relaxed) ? g_checker.pendingReports() : 0;
}
Status checkDrainReports(std::vector<CheckReport>* out) {
  if (!out) return remember(Status(Code::InvalidValue, "checkDrainReports: 'out' is null"));
  *out = g_checker.drain();
  return Status::Ok();
}

}  // namespace cardsim::shim

extern "C" int cardsim_timing_note_host_write(const void* dev_ptr, std::size_t bytes) {
  return static_cast<int>(cardsim::shim::timingNoteHostWrite(dev_ptr, bytes).code());
}
