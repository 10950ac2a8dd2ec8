// The `sim` backend: the shim's calls on the in-process SystemC model. One class, its
// definitions split by concern: SimBackend.cpp (devices, kernels, time, activities),
// SimMemory.cpp (memory and copies), SimStreams.cpp (streams and events), SimGraphs.cpp
// (capture, graphs, host functions).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "Backend.h"
#include "CarriedData.h"
#include "DeviceMemory.h"
#include "HandlePool.h"
#include "FabricAnswers.h"
#include "simulator/FabricModel.h"
#include "simulator/Simulator.h"

namespace cardsim::sim {
class FabricClient;
}  // namespace cardsim::sim

namespace cardsim::shim {

struct StreamObject {
  int device = 0;
  uint32_t id = 0;
  model::QueueId queue{};
  int priority = 0;
  int rank = 0;
  std::atomic<bool> alive{true};
  std::mutex mutex;
  model::QueuePoint last;    // after this stream's latest command
  // Stream capture: while `capture` is set, work is recorded into it instead of run. The
  // stream that began the capture owns it; streams that joined it (by waiting on an event
  // recorded in it) record into the same graph until the origin waits on them again.
  std::shared_ptr<GraphObject> capture;
  bool capture_origin = false;
  std::atomic<bool> capturing{false};  // capture != nullptr, readable without the lock
  std::string capture_broken;  // why the capture was invalidated, if it was

  void reset() {
    device = 0;
    id = 0;
    queue = model::QueueId{};
    priority = rank = 0;
    alive = true;
    last = model::QueuePoint{};
    capture.reset();
    capture_origin = false;
    capturing = false;
    capture_broken.clear();
  }
};

// One recorded operation: its functional effect and its command for the model. A host
// node (launchHostFunc) has work but no command: it runs on the host, in order, at replay.
struct GraphNode {
  std::string name;
  std::function<void()> work;
  model::Command cmd;
  bool host_only = false;
  uint32_t stream_id = 0;   // the captured stream it was queued on: its lane at replay
  // An event recorded (or waited on) inside the capture: not a command of its own but a
  // dependency between lanes at replay. The index is the graph's own numbering of events.
  int record_marker = -1;
  int wait_marker = -1;
  bool marker() const { return record_marker >= 0 || wait_marker >= 0; }
  // Timing mode: the kernel's work, never run, kept for what it holds (the memory it reads
  // and writes lives as long as the graph, as in full mode).
  std::function<void()> held;
};

struct GraphObject {
  std::atomic<bool> alive{true};
  int device = 0;
  std::mutex mutex;                    // nodes, joined and broken while capturing
  std::vector<GraphNode> nodes;        // in capture order, which replays serialize
  std::vector<StreamObject*> joined;   // streams recording into it besides the origin
  std::string broken;                  // why a joined stream invalidated the capture
  CaptureMode mode = CaptureMode::Global;
  std::thread::id owner;               // the thread that began the capture
  uint32_t origin_stream = 0;          // replays on the launch stream; other streams on lanes
  int markers = 0;                     // events recorded inside the capture
  std::vector<StreamObject*> lanes;    // replay streams of the forked branches (kept across replays)

  void reset() {
    alive = true;
    device = 0;
    nodes.clear();
    joined.clear();
    broken.clear();
    origin_stream = 0;
    markers = 0;
    lanes.clear();
  }
};

struct EventObject {
  unsigned flags = 0;
  std::atomic<bool> alive{true};
  std::mutex mutex;
  bool recorded = false;
  int device = -1;
  model::QueuePoint point;
  std::shared_ptr<model::EventSlot> slot;
  // Recorded last inside a capture: the capture it belongs to and the stream that recorded it.
  std::weak_ptr<GraphObject> captured_in;
  StreamObject* captured_stream = nullptr;
  uint32_t captured_on = 0;
  int captured_marker = -1;   // its number in that capture's graph

  void reset() {
    flags = 0;
    alive = true;
    recorded = false;
    captured_in.reset();
    captured_stream = nullptr;
    captured_on = 0;
    captured_marker = -1;
    device = -1;
    point = model::QueuePoint{};
    slot.reset();
  }
};

namespace simbackend {


using sim::Simulator;
using model::CommandKind;
using model::DeviceId;
using model::QueueId;

inline thread_local int t_current_device = 0;

inline Status invalidDevice(int device, int count) {
  return Status(Code::InvalidDevice, "invalid device " + std::to_string(device) + ": " +
                                         std::to_string(count) + " device(s) present (0.." +
                                         std::to_string(count - 1) + ")");
}

inline model::DType toModel(DataType t) {
  switch (t) {
    case DataType::Float64: return model::DType::FP64;
    case DataType::Float32: return model::DType::FP32;
    case DataType::TFloat32: return model::DType::TF32;
    case DataType::Float16: return model::DType::FP16;
    case DataType::BFloat16: return model::DType::BF16;
    case DataType::Int8: return model::DType::INT8;
  }
  return model::DType::FP32;
}

inline model::KernelClass toModel(KernelClass k) {
  switch (k) {
    case KernelClass::Gemm: return model::KernelClass::Gemm;
    case KernelClass::Elementwise: return model::KernelClass::Elementwise;
    case KernelClass::Reduction: return model::KernelClass::Reduction;
    case KernelClass::Other: return model::KernelClass::Other;
  }
  return model::KernelClass::Other;
}

inline const char* memcpyKindName(MemcpyKind k) {
  switch (k) {
    case MemcpyKind::HostToDevice: return "HostToDevice";
    case MemcpyKind::DeviceToHost: return "DeviceToHost";
    case MemcpyKind::DeviceToDevice: return "DeviceToDevice";
    case MemcpyKind::HostToHost: return "HostToHost";
    case MemcpyKind::Default: return "Default";
  }
  return "?";
}
class SimBackend final : public IBackend {
 public:
  SimBackend(Simulator& sim, std::unique_ptr<sim::FabricModel> fabric, std::string fabric_error, bool timing,
             bool discard_data = false)
      : sim_(sim), fabric_(std::move(fabric)), fabric_error_(std::move(fabric_error)), timing_(timing),
        discard_data_(timing && discard_data), carrying_(timing && !discard_data), params_(sim.params()), devices_(static_cast<int>(sim.deviceCount())),
        memory_(std::vector<uint64_t>(sim.deviceCount(), sim.params().memory.capacity_bytes),
                std::vector<std::string>(sim.deviceCount(), sim.params().name)) {
    for (int d = 0; d < devices_; ++d) {
      auto s = std::make_unique<StreamObject>();
      s->device = d;
      s->id = 0;
      s->queue = QueueId{0};
      s->priority = 0;
      s->rank = rankOf(clampPriority(0));
      s->last = {DeviceId{static_cast<uint32_t>(d)}, QueueId{0}, 0};
      default_streams_.push_back(std::move(s));
    }
    next_queue_.assign(static_cast<size_t>(devices_), 0);
    // Collectives answered later are settled before any run reaches them (FabricAnswers.h).
    sim_.setBeforeRun([this] { settleFabricAnswers(); });
  }
  ~SimBackend() override { sim_.setBeforeRun(nullptr); }

  const char* name() const override { return "sim"; }

  // ---- devices
  Status getDeviceCount(int* count) override;
  Status setDevice(int device) override;
  Status getDevice(int* device) override;
  Status getDeviceProperties(DeviceProperties* p, int device) override;
  Status deviceSynchronize() override;
  Status waitForQueuedWork() override;
  std::string captureInProgress() override;
  Status deviceCanAccessPeer(int* can, int device, int peer) override;

  // ---- memory
  Status malloc(void** ptr, std::size_t bytes) override;
  Status free(void* ptr) override;
  Status memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) override;
  Status hostMalloc(void** ptr, std::size_t bytes) override;
  Status hostFree(void* ptr) override;
  Status hostRegister(void* ptr, std::size_t bytes) override;
  Status hostUnregister(void* ptr) override;
  Status pointerGetAttributes(PointerAttributes* a, const void* ptr) override;

  Status memset(void* ptr, int value, std::size_t bytes, Stream stream, bool async) override;

  Status memcpy(void* dst, const void* src, std::size_t bytes, MemcpyKind kind, Stream stream,
                bool async) override;

  Status memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                         std::size_t bytes, Stream stream) override;

  // ---- streams
  Status streamCreate(Stream* out, int priority) override;
  Status streamDestroy(Stream stream) override;
  Status streamSynchronize(Stream stream) override;
  Status streamQuery(Stream stream) override;
  Status streamGetPriority(Stream stream, int* priority) override;
  Status streamGetDevice(Stream stream, int* device) override;
  Status streamGetId(Stream stream, uint32_t* id) override;
  Status streamWaitEvent(Stream stream, Event event) override;
  Status deviceGetStreamPriorityRange(int* least, int* greatest) override;

  // ---- events
  Status eventCreate(Event* out, unsigned flags) override;
  Status eventDestroy(Event event) override;
  Status eventRecord(Event event, Stream stream) override;
  Status eventQuery(Event event) override;
  Status eventSynchronize(Event event) override;
  Status eventElapsedTime(float* ms, Event start, Event end) override;

  // ---- kernels
  Status launchKernel(Stream stream, std::string_view kname, const KernelCost& cost,
                      const std::function<void()>& work) override;

  Status launchCollective(Stream stream, std::string_view cname, double seconds) override;

  // ---- graphs
  Status streamBeginCapture(Stream stream, CaptureMode mode) override;
  Status streamEndCapture(Stream stream, Graph* graph) override;
  Status streamIsCapturing(Stream stream, bool* is) override;
  Status graphNodeCount(Graph graph, std::size_t* count) override;
  Status graphDescribe(Graph graph, std::vector<GraphNodeInfo>* nodes) override;
  Status graphLaunch(Graph graph, Stream stream) override;
  Status graphDestroy(Graph graph) override;
  Status launchHostFunc(Stream stream, std::function<void()> fn) override;
  int fabricDeviceOf(const sim::FabricClient& client, int device) const;
  Status launchFabricCollective(Stream stream, const CollectiveDesc& desc, double* seconds,
                                std::string* algorithm) override;

  // ---- time and activities
  Status hostTimePs(uint64_t* ps) override;
  Status hostClockShareBegin() override;
  Status hostClockShareEnd() override;
  Status hostClockJoin(uint64_t ps) override;
  Status hostThreadClock(uint64_t* ps, bool* started) override;
  void hostCallBegins() override { sim_.hostCallBegins(); }
  void hostCallReturns() override { sim_.hostCallReturns(); }
  bool measuresHostCalls() const override { return sim_.measuredHostFactor() > 0; }
  Status setActivityRecording(bool on) override;
  Status drainActivities(std::vector<ActivityRecord>* out) override;
  Status deviceUsage(int device, uint64_t* used, uint64_t* total, double* busy_cluster_s,
                     double* busy_memory_s = nullptr) override;
  Status timingNoteHostWrite(const void* ptr, std::size_t bytes) override;
  Status timingScrub(void* ptr, std::size_t bytes) override;
  Status fabricServe(const std::string& bind, uint16_t port, uint16_t* bound_port, std::string* local_address) override;
  Status fabricConnect(const std::string& address, const std::string& job, int rank, int world_size,
                       double connect_timeout_s) override;
  Status fabricAddress(std::string* address) override;
  Status fabricPark(bool parked) override;
  Status fabricGone(const std::vector<int>& ranks, double timeout_s,
                    std::vector<std::pair<int, std::string>>* gone) override;
  Status fabricDisconnect() override;
  Status fabricSettle() override;

 private:
  // A peer copy about to be submitted (not captured) on `s`: told to the job's fabric server, if any, so that
  // the collectives it times after it share the links with it (SimCollectives.cpp).
  void reportPeerCopy(StreamObject* s, int src_device, int dst_device, std::size_t bytes);
  bool fabric_revise_ = true;   // CARDSIM_FABRIC_REVISE (read at fabricConnect)
  FabricAnswers answers_;       // collectives launched with answer_later, not yet answered
  void settleFabricAnswers();
  void applyAnswer(const sim::FabricClient::Collective& c, const std::shared_ptr<model::CollectiveEnd>& end,
                   const sim::FabricClient::Completion& done);
  static Status collectiveStartsAtCall(bool* from_call);   // CARDSIM_COLL_START
  static DeviceId dev(int d) { return DeviceId{static_cast<uint32_t>(d)}; }
  static std::string hex(unsigned v) {
    char b[16];
    std::snprintf(b, sizeof b, "%x", v);
    return b;
  }
  static Status nullArg(const char* fn, const char* arg) {
    return Status(Code::InvalidValue, std::string(fn) + ": '" + arg + "' is null");
  }
  static ActivityRecord::Kind kindOf(const sim::Activity& a) {
    switch (a.kind) {
      case CommandKind::Kernel: return ActivityRecord::Kind::Kernel;
      case CommandKind::EventRecord: return ActivityRecord::Kind::EventRecord;
      case CommandKind::EventWait: return ActivityRecord::Kind::EventWait;
      case CommandKind::Collective: return ActivityRecord::Kind::Collective;
      case CommandKind::Copy: break;
    }
    switch (a.copy_kind) {
      case model::CopyKind::HostToDevice: return ActivityRecord::Kind::MemcpyHtoD;
      case model::CopyKind::DeviceToHost: return ActivityRecord::Kind::MemcpyDtoH;
      case model::CopyKind::DeviceToDevice: return ActivityRecord::Kind::MemcpyDtoD;
      case model::CopyKind::PeerToPeer: return ActivityRecord::Kind::MemcpyPeer;
      case model::CopyKind::Memset: return ActivityRecord::Kind::Memset;
    }
    return ActivityRecord::Kind::Kernel;
  }

  int clampPriority(int p) const {
    const int lo = std::min(params_.queues.priority_least, params_.queues.priority_greatest);
    const int hi = std::max(params_.queues.priority_least, params_.queues.priority_greatest);
    return std::clamp(p, lo, hi);
  }
  // Smaller rank = more urgent, whichever way the card numbers its priorities.
  int rankOf(int p) const {
    return params_.queues.priority_greatest <= params_.queues.priority_least ? p : -p;
  }

  template <typename F>
  Status guard(F&& f) {
    try {
      return f();
    } catch (const sim::SimulationOverflow& e) {
      return Status(Code::TimeOverflow, e.what());
    } catch (const std::exception& e) {
      return Status(Code::Internal, e.what());
    }
  }

  Status checkStream(Stream s, const char* fn) {
    if (!s->alive.load())
      return Status(Code::InvalidHandle, std::string(fn) + ": stream " + std::to_string(s->id) +
                                             " was destroyed");
    return Status::Ok();
  }
  Status checkEvent(Event e, const char* fn) {
    if (!e) return Status(Code::InvalidHandle, std::string(fn) + ": event is null");
    if (!e->alive.load()) return Status(Code::InvalidHandle, std::string(fn) + ": event was destroyed");
    return Status::Ok();
  }
  Status resolve(Stream stream, const char* fn, StreamObject** out) {
    if (!stream) {
      *out = default_streams_[static_cast<size_t>(t_current_device)].get();
      return Status::Ok();
    }
    if (Status st = checkStream(stream, fn); !st.ok()) return st;
    *out = stream;
    return Status::Ok();
  }
  // Host cost of each graph node after the first: small but > 0, as every call must be.
  static constexpr double kGraphNodeHostSeconds = 1e-9;

  bool capturing(StreamObject* s) { return s->capturing.load(std::memory_order_acquire); }
  // A potentially unsafe call (shim.h, capture modes): fails, invalidating each capture under
  // way that prohibits it on this thread.
  Status checkUnsafeCall(const char* what);
  // A stream of the runtime's own (graph replay lanes), on `device`.
  StreamObject* newStream(int device, int priority, bool internal = false);
  static constexpr uint32_t kFirstInternalStreamId = 1u << 30;
  // Appends an event marker node to the capture `g` (record: returns the new number).
  int appendMarker(GraphObject& g, uint32_t stream_id, bool record, int wait_for);
  Status breakCapture(StreamObject* s, const std::string& what) {
    std::shared_ptr<GraphObject> g;
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      g = std::move(s->capture);
      s->capturing = false;
      if (s->capture_origin) s->capture_broken = what;
      s->capture_origin = false;
    }
    if (g) {   // a joined stream breaks the capture of its origin, which reports it at its end
      std::lock_guard<std::mutex> lock(g->mutex);
      if (g->broken.empty()) g->broken = what + " (on joined stream " + std::to_string(s->id) + ")";
      g->joined.erase(std::remove(g->joined.begin(), g->joined.end(), s), g->joined.end());
    }
    return Status(Code::NotSupported, what + " is not allowed while stream " + std::to_string(s->id) +
                                          " is capturing; the capture is invalidated");
  }
  // Detaches a joined stream from the capture it records into.
  void leaveCapture(StreamObject* s) {
    std::shared_ptr<GraphObject> g;
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      if (s->capture_origin) return;
      g = std::move(s->capture);
      s->capturing = false;
    }
    if (!g) return;
    std::lock_guard<std::mutex> lock(g->mutex);
    g->joined.erase(std::remove(g->joined.begin(), g->joined.end(), s), g->joined.end());
  }
  // `held_only`: `work` is kept, not run at replay (timing mode).
  Status record(StreamObject* s, std::string_view name, std::function<void()> work,
                model::Command cmd, bool held_only = false) {
    std::shared_ptr<GraphObject> g;
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      g = s->capture;
    }
    if (!g) return Status(Code::Internal, "stream stopped capturing");
    std::lock_guard<std::mutex> lock(g->mutex);
    GraphNode n;
    n.name = std::string(name);
    (held_only ? n.held : n.work) = std::move(work);
    n.cmd = std::move(cmd);
    n.stream_id = s->id;
    g->nodes.push_back(std::move(n));
    return Status::Ok();
  }
  Status checkGraph(Graph g, const char* fn) {
    if (!g) return Status(Code::InvalidHandle, std::string(fn) + ": graph is null");
    if (!g->alive.load()) return Status(Code::InvalidHandle, std::string(fn) + ": graph was destroyed");
    return Status::Ok();
  }

  bool pointOf(Event e, model::QueuePoint* p) {
    std::lock_guard<std::mutex> lock(e->mutex);
    if (!e->recorded) return false;
    *p = e->point;
    return true;
  }
  model::QueuePoint lastOf(StreamObject* s) {
    std::lock_guard<std::mutex> lock(s->mutex);
    return s->last;
  }
  bool isPinned(const void* host_ptr) const {
    DeviceMemory::Found f;
    return memory_.find(host_ptr, &f) && !f.device_memory;
  }
  Status checkDeviceRange(const char* fn, const char* role, const void* ptr, std::size_t bytes,
                          DeviceMemory::Found* f) {
    if (!memory_.find(ptr, f) || !f->device_memory) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%p", ptr);
      return Status(Code::InvalidValue, std::string(fn) + ": " + role + " " + buf +
                                            " is not device memory allocated by cardsim");
    }
    const std::size_t offset = static_cast<std::size_t>(static_cast<const uint8_t*>(ptr) - f->base);
    if (bytes > f->size - offset)
      return Status(Code::InvalidValue, std::string(fn) + ": " + role + " range of " +
                                            std::to_string(bytes) + " bytes at offset " +
                                            std::to_string(offset) + " runs past its allocation of " +
                                            std::to_string(f->size) + " bytes on device " +
                                            std::to_string(f->device));
    return Status::Ok();
  }

  // Launch names repeat (often the same literal): skip the shared table when this thread
  // used the same name last time.
  uint32_t nameId(std::string_view label) {
    thread_local std::string last_name;
    thread_local uint32_t last_id = 0;
    thread_local const Simulator* last_sim = nullptr;
    if (last_sim == &sim_ && last_id != 0 && label == last_name) return last_id;
    last_id = sim_.internName(label);
    last_name.assign(label);
    last_sim = &sim_;
    return last_id;
  }

  Status submit(StreamObject* s, model::Command cmd, std::string_view label, double overhead,
                model::QueuePoint* point) {
    cmd.stream_tag = s->id;
    cmd.correlation = currentCorrelationId();
    cmd.priority_rank = s->rank;
    cmd.name_id = nameId(label);
    return guard([&] {
      // The stream's lock keeps its commands in order when threads share a stream.
      std::lock_guard<std::mutex> lock(s->mutex);
      s->last = sim_.submit(dev(s->device), s->queue, std::move(cmd), overhead);
      if (point) *point = s->last;
      return Status::Ok();
    });
  }
  Status submitAndMaybeWait(StreamObject* s, model::Command cmd, std::string_view label,
                            double overhead, bool wait) {
    model::QueuePoint p;
    if (Status st = submit(s, std::move(cmd), label, overhead, &p); !st.ok()) return st;
    if (!wait) return Status::Ok();
    return guard([&] {
      sim_.waitFor({p}, params_.host.sync_overhead_s);
      return Status::Ok();
    });
  }

  Simulator& sim_;
  std::unique_ptr<sim::FabricModel> fabric_;   // null when the preset has no usable fabric
  std::string fabric_error_;                   // why not
  bool timing_;                                // ExecutionMode::Timing: no work, no device memory touched
  bool discard_data_;                          // timing, and not even carried host data (InitOptions::move_data)
  bool carrying_;                              // timing with carried host data: carried_ is in use
  CarriedData carried_;                        // timing mode: the small host data kept (CarriedData.h)
  const model::DeviceParams& params_;
  int devices_;
  DeviceMemory memory_;
  std::vector<std::unique_ptr<StreamObject>> default_streams_;
  std::mutex streams_mutex_;
  std::vector<StreamObject*> streams_;   // alive created streams (for deviceSynchronize)
  HandlePool<StreamObject> stream_pool_;
  HandlePool<EventObject> event_pool_;
  HandlePool<GraphObject> graph_pool_;
  std::vector<uint32_t> next_queue_;
  uint32_t next_stream_id_ = 1;
  // The runtime's own streams (graph replay lanes) are numbered apart, so that the ids of the
  // streams a program creates do not depend on how many graphs it replayed.
  uint32_t next_internal_stream_id_ = kFirstInternalStreamId;
};

}  // namespace simbackend
}  // namespace cardsim::shim
