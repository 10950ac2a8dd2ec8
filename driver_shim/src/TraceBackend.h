// The backend that records (cardsim/trace.h): it wraps the process's backend and forwards
// every call to it; while a trace is being recorded, each call that does something on a
// card, or moves the host clock, also becomes a record (TraceRecorder). Runtime.cpp
// installs it when the backend starts with CARDSIM_TRACE set, or when traceStart() is
// first called; a process that never traces never has one, so not recording costs
// nothing, and a stopped trace leaves one branch per call.
//
// Every IBackend virtual must be forwarded here: one left to IBackend's default would
// answer for the real backend in traced runs.
//
// Inner calls made for the recording itself (clock readings, stream ids, pointer lookups)
// are ones that cost no simulated time, so a traced run has the simulated times of an
// untraced one, except that stopping synchronizes the devices the trace used.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "Backend.h"
#include "cardsim/trace.h"

namespace cardsim::trace {
class Header;
class Envelope;
}

namespace cardsim::shim {

class TraceRecorder;

class TraceBackend final : public IBackend {
 public:
  // `options` are those the backend started with (for the header).
  TraceBackend(std::unique_ptr<IBackend> inner, InitOptions options);
  ~TraceBackend() override;

  // CARDSIM_TRACE: records into `directory` from the first call that does work on a card.
  void arm(const std::string& directory);
  // `compression` empty: CARDSIM_TRACE_COMPRESS. `observer` (if any) gets every record too;
  // with an observer, an empty `directory` writes no file.
  Status start(const std::string& directory, const std::string& compression, TraceObserver* observer = nullptr);
  Status stop(const std::string& reason);
  bool active(std::string* path);

  const char* name() const override { return inner_->name(); }

  Status getDeviceCount(int* count) override { return inner_->getDeviceCount(count); }
  Status setDevice(int device) override;
  Status getDevice(int* device) override { return inner_->getDevice(device); }
  Status getDeviceProperties(DeviceProperties* props, int device) override {
    return inner_->getDeviceProperties(props, device);
  }
  Status deviceSynchronize() override;
  Status waitForQueuedWork() override { return inner_->waitForQueuedWork(); }
  std::string captureInProgress() override { return inner_->captureInProgress(); }
  Status deviceCanAccessPeer(int* can_access, int device, int peer) override {
    return inner_->deviceCanAccessPeer(can_access, device, peer);
  }

  Status malloc(void** ptr, std::size_t bytes) override;
  Status free(void* ptr) override;
  Status memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) override;
  Status hostMalloc(void** ptr, std::size_t bytes) override;
  Status hostFree(void* ptr) override;
  Status hostRegister(void* ptr, std::size_t bytes) override;
  Status hostUnregister(void* ptr) override;
  Status pointerGetAttributes(PointerAttributes* attrs, const void* ptr) override {
    return inner_->pointerGetAttributes(attrs, ptr);
  }
  Status memset(void* ptr, int value, std::size_t bytes, Stream stream, bool async) override;
  Status memcpy(void* dst, const void* src, std::size_t bytes, MemcpyKind kind, Stream stream,
                bool async) override;
  Status memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                         std::size_t bytes, Stream stream) override;

  Status streamCreate(Stream* stream, int priority) override;
  Status streamDestroy(Stream stream) override;
  Status streamSynchronize(Stream stream) override;
  Status streamQuery(Stream stream) override;
  Status streamGetPriority(Stream stream, int* priority) override {
    return inner_->streamGetPriority(stream, priority);
  }
  Status streamGetDevice(Stream stream, int* device) override { return inner_->streamGetDevice(stream, device); }
  Status streamGetId(Stream stream, uint32_t* id) override { return inner_->streamGetId(stream, id); }
  Status streamWaitEvent(Stream stream, Event event) override;
  Status deviceGetStreamPriorityRange(int* least, int* greatest) override {
    return inner_->deviceGetStreamPriorityRange(least, greatest);
  }

  Status eventCreate(Event* event, unsigned flags) override;
  Status eventDestroy(Event event) override;
  Status eventRecord(Event event, Stream stream) override;
  Status eventQuery(Event event) override;
  Status eventSynchronize(Event event) override;
  Status eventElapsedTime(float* ms, Event start, Event end) override;

  Status launchKernel(Stream stream, std::string_view name, const KernelCost& cost,
                      const std::function<void()>& work) override;
  Status launchCollective(Stream stream, std::string_view name, double seconds) override;
  Status launchHostFunc(Stream stream, std::function<void()> fn) override;
  Status launchFabricCollective(Stream stream, const CollectiveDesc& desc, double* seconds,
                                std::string* algorithm) override;

  Status streamBeginCapture(Stream stream, CaptureMode mode) override;
  Status streamEndCapture(Stream stream, Graph* graph) override;
  Status streamIsCapturing(Stream stream, bool* capturing) override {
    return inner_->streamIsCapturing(stream, capturing);
  }
  Status graphNodeCount(Graph graph, std::size_t* count) override { return inner_->graphNodeCount(graph, count); }
  Status graphDescribe(Graph graph, std::vector<GraphNodeInfo>* nodes) override {
    return inner_->graphDescribe(graph, nodes);
  }
  Status graphLaunch(Graph graph, Stream stream) override;
  Status graphDestroy(Graph graph) override;

  Status hostTimePs(uint64_t* ps) override { return inner_->hostTimePs(ps); }
  Status hostClockShareBegin() override;
  Status hostClockShareEnd() override;
  Status hostClockJoin(uint64_t ps) override;
  Status hostThreadClock(uint64_t* ps, bool* started) override { return inner_->hostThreadClock(ps, started); }
  void hostCallBegins() override { inner_->hostCallBegins(); }
  void hostCallReturns() override { inner_->hostCallReturns(); }
  bool measuresHostCalls() const override { return inner_->measuresHostCalls(); }
  Status setActivityRecording(bool on) override;
  Status drainActivities(std::vector<ActivityRecord>* out) override;

  Status fabricServe(const std::string& bind, uint16_t port, uint16_t* bound_port, std::string* local_address) override {
    return inner_->fabricServe(bind, port, bound_port, local_address);
  }
  Status fabricConnect(const std::string& address, const std::string& job, int rank, int world_size,
                       double connect_timeout_s) override;
  Status fabricAddress(std::string* address) override { return inner_->fabricAddress(address); }
  Status fabricPark(bool parked) override { return inner_->fabricPark(parked); }
  Status fabricGone(const std::vector<int>& ranks, double timeout_s,
                    std::vector<std::pair<int, std::string>>* gone) override {
    return inner_->fabricGone(ranks, timeout_s, gone);
  }
  Status fabricDisconnect() override { return inner_->fabricDisconnect(); }
  Status fabricSettle() override { return inner_->fabricSettle(); }
  // The vendor's collectives (native backend): passed through, not recorded.
  Status commGetUniqueId(std::string* id) override { return inner_->commGetUniqueId(id); }
  Status commInitRank(Comm* comm, int nranks, const std::string& id, int rank) override {
    return inner_->commInitRank(comm, nranks, id, rank);
  }
  Status commDestroy(Comm comm) override { return inner_->commDestroy(comm); }
  Status commLaunch(const CommCall& call, Comm comm, Stream stream) override {
    return inner_->commLaunch(call, comm, stream);
  }
  Status commGroup(bool start) override { return inner_->commGroup(start); }

  Status deviceUsage(int device, uint64_t* used, uint64_t* total, double* busy_cluster_s,
                     double* busy_memory_s = nullptr) override {
    return inner_->deviceUsage(device, used, total, busy_cluster_s, busy_memory_s);
  }
  Status timingNoteHostWrite(const void* ptr, std::size_t bytes) override {
    return inner_->timingNoteHostWrite(ptr, bytes);
  }
  Status timingScrub(void* ptr, std::size_t bytes) override { return inner_->timingScrub(ptr, bytes); }

  // Armed or recording (traceRecording()), and not paused on this thread (traceThisThread).
  bool hooked() const { return hooked_.load(std::memory_order_relaxed) && !t_trace_paused; }
  static inline thread_local bool t_trace_paused = false;

 private:
  // What a call looked like before it ran.
  struct Begin {
    uint32_t thread;
    uint64_t ps;
    bool started;
  };
  // Where a call submits: its stream's device and id.
  struct Target {
    int device = 0;
    uint32_t stream = 0;
  };

  // This thread's operand shapes for its next kernel launch (traceNextKernelShapes), taken.
  static std::vector<std::vector<int64_t>> takeNextKernelShapes(uint32_t* outputs);
  Begin begin();
  Target target(Stream stream);
  // Records one host call: `fill` sets the record's payload. `target` (if not null) is
  // where it submitted device commands. `opens`: the call may open an armed trace.
  template <typename Fill>
  void record(const Begin& b, const Status& st, const Target* target, bool opens, Fill&& fill);
  trace::Header header(const char* started_by);
  static std::string rankFile(const std::string& directory);
  Status openLocked(const std::string& directory, const char* started_by, const std::string& compression = "",
                    TraceObserver* observer = nullptr);
  void drainLocked();
  void synchronizeUsedLocked();
  void failLocked(const std::string& what);

  std::unique_ptr<IBackend> inner_;
  InitOptions options_;
  // Files this process's recordings wrote, by (device, inode): a later recording refuses to
  // replace one.
  std::set<std::pair<uint64_t, uint64_t>> written_;
  std::atomic<bool> hooked_{false};   // armed or recording
  std::mutex mutex_;
  std::unique_ptr<TraceRecorder> recorder_;
  std::string armed_directory_;       // CARDSIM_TRACE, until the first call that opens it
  bool user_recording_ = false;       // setActivityRecording(true) from the program
  std::vector<ActivityRecord> user_pending_;
  std::vector<ActivityRecord> scratch_;
  std::map<Stream, int> capturing_;   // streams capturing (begun while hooked), by device
  uint32_t calls_since_drain_ = 0;
  int owner_pid_ = 0;                  // the process that opened the file
  std::string fabric_job_;             // fabricConnect's job key (for the End record)
  std::atomic<uint32_t> next_thread_{0};
};

// Runtime.cpp: wraps `backend` when CARDSIM_TRACE asks for a trace.
std::unique_ptr<IBackend> wrapForTracing(std::unique_ptr<IBackend> backend, const InitOptions& options);

// Runtime.cpp: the program turned its activity records on or off (whichever backend ran).
void noteActivityRecording(bool on);

// Defined in Runtime.cpp: the running backend wrapped in a TraceBackend (starting the
// backend first if needed, and wrapping it only once), or null with `why` set.
TraceBackend* tracingBackend(Status* why);

}  // namespace cardsim::shim
