// The `native` backend: the shim's calls on a real vendor runtime (CNRT for Cambricon
// presets, the SUPA runtime for Biren ones), loaded with dlopen (VendorRuntime.h).
//
// What runs where: memory, copies, memsets, queues and notifiers are the vendor's. No vendor
// kernel is bound, so a kernel runs the emulator's host path: the backend waits for the
// kernel's queue, then runs the kernel's host callable on the device pointers, which needs
// device memory the host can address (true of the test stubs; on a real card it would need
// staging, which this backend does not do). Host functions run the same way. The torch
// layer's c10d collectives still move their data through Gloo on host views, untimed. Stream capture is
// the shim's own: the captured operations are kept and re-issued on the vendor's queue at
// each replay (capture on one stream; a fork to other streams is refused). The shim's
// communicators are the vendor's (CNCL, BCCL), opened on first use. There is no
// device model: no simulated time, no profiler activities, no fabric.
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <vector>

#include "Backend.h"
#include "native/VendorRuntime.h"

namespace cardsim::shim::native {

struct NativeGraph;

struct NativeStream {
  int device = 0;
  uint32_t id = 0;
  VendorQueue queue = nullptr;   // null: the device's default queue
  int priority = 0;
  std::shared_ptr<NativeGraph> capture;   // set while capturing
};

struct NativeEvent {
  VendorNotifier notifier = nullptr;
  unsigned flags = 0;
  uint32_t captured_in = 0;   // recorded inside a capture: the capturing stream's id
};

// The shim's handle types are the sim backend's structs; this backend's objects travel in
// them as opaque pointers and are never read as the sim's.
inline NativeStream* nat(Stream s) { return reinterpret_cast<NativeStream*>(s); }
inline Stream handle(NativeStream* s) { return reinterpret_cast<Stream>(s); }
inline NativeEvent* nat(Event e) { return reinterpret_cast<NativeEvent*>(e); }
inline Event handle(NativeEvent* e) { return reinterpret_cast<Event>(e); }

inline Status nullArg(const char* what, const char* arg) {
  return Status(Code::InvalidValue, std::string(what) + ": " + arg + " is null");
}

class NativeBackend final : public IBackend {
 public:
  NativeBackend(std::unique_ptr<IVendorRuntime> runtime, std::string preset, int devices);
  // The shim's own wrappers of what the program never destroyed go with the backend; the
  // vendor's objects are left to the runtime's teardown (the library may be gone first).
  ~NativeBackend() override;
  const char* name() const override { return "native"; }

  Status getDeviceCount(int* count) override;
  Status setDevice(int device) override;
  Status getDevice(int* device) override;
  Status getDeviceProperties(DeviceProperties* props, int device) override;
  Status deviceSynchronize() override;
  Status deviceCanAccessPeer(int* can_access, int device, int peer) override;

  Status malloc(void** ptr, std::size_t bytes) override;
  Status free(void* ptr) override;
  Status memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) override;
  Status hostMalloc(void** ptr, std::size_t bytes) override;
  Status hostFree(void* ptr) override;
  Status hostRegister(void* ptr, std::size_t bytes) override;
  Status hostUnregister(void* ptr) override;
  Status pointerGetAttributes(PointerAttributes* attrs, const void* ptr) override;
  Status memset(void* ptr, int value, std::size_t bytes, Stream stream, bool async) override;
  Status memcpy(void* dst, const void* src, std::size_t bytes, MemcpyKind kind, Stream stream,
                bool async) override;
  Status memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                         std::size_t bytes, Stream stream) override;

  Status streamCreate(Stream* stream, int priority) override;
  Status streamDestroy(Stream stream) override;
  Status streamSynchronize(Stream stream) override;
  Status streamQuery(Stream stream) override;
  Status streamGetPriority(Stream stream, int* priority) override;
  Status streamGetDevice(Stream stream, int* device) override;
  Status streamGetId(Stream stream, uint32_t* id) override;
  Status streamWaitEvent(Stream stream, Event event) override;
  Status deviceGetStreamPriorityRange(int* least, int* greatest) override;

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
  Status streamIsCapturing(Stream stream, bool* capturing) override;
  Status graphNodeCount(Graph graph, std::size_t* count) override;
  Status graphDescribe(Graph graph, std::vector<GraphNodeInfo>* nodes) override;
  Status graphLaunch(Graph graph, Stream stream) override;
  Status graphDestroy(Graph graph) override;

  Status hostTimePs(uint64_t* ps) override;
  Status hostClockShareBegin() override { return Status::Ok(); }
  Status hostClockShareEnd() override { return Status::Ok(); }
  Status hostClockJoin(uint64_t) override { return Status::Ok(); }
  Status hostThreadClock(uint64_t* ps, bool* started) override;
  Status setActivityRecording(bool) override { return Status::Ok(); }
  Status drainActivities(std::vector<ActivityRecord>* out) override;
  Status deviceUsage(int device, uint64_t* used, uint64_t* total, double* busy_cluster_s,
                     double* busy_memory_s = nullptr) override;

  Status commGetUniqueId(std::string* id) override;
  Status commInitRank(Comm* comm, int nranks, const std::string& id, int rank) override;
  Status commDestroy(Comm comm) override;
  Status commLaunch(const CommCall& call, Comm comm, Stream stream) override;
  Status commGroup(bool start) override;

  IVendorRuntime& runtime() { return *rt_; }

 private:
  struct Allocation {
    std::size_t bytes = 0;
    int device = -1;   // -1: pinned host memory (hostMalloc)
  };

  Status resolve(Stream stream, const char* what, NativeStream** out);
  Status currentDevice(int* device);
  // Records `op` into the stream's capture if it has one (*recorded = true); otherwise the
  // caller runs it now.
  Status maybeCapture(NativeStream* s, const char* what, GraphNodeInfo info,
                      std::function<Status(VendorQueue)> op, bool* recorded);
  Status refuseWhileCapturing(const char* what);
  Status runOnHost(NativeStream* s, const char* what, const std::function<void()>& work);
  bool findAllocation(const void* ptr, const void** base, Allocation* a);
  void deleteComms();
  // The vendor's collective library, opened on first use.
  Status collectives(IVendorCollectives** out);

  std::unique_ptr<IVendorRuntime> rt_;
  std::unique_ptr<IVendorCollectives> coll_;
  std::string preset_;
  int devices_ = 0;
  std::mutex mutex_;
  std::map<const void*, Allocation> allocations_;   // by base address
  std::map<const void*, std::size_t> registered_;   // host ranges registered with the runtime
  std::vector<std::unique_ptr<NativeStream>> default_streams_;   // one per device
  std::set<NativeStream*> streams_;                               // created, not destroyed
  std::set<NativeEvent*> events_;
  std::set<void*> comms_;                                         // NativeComm*
  std::vector<uint32_t> next_stream_id_;                          // per device
  std::vector<uint64_t> used_bytes_;                              // per device
  int capturing_ = 0;   // streams capturing now
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace cardsim::shim::native
