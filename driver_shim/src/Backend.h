// The seam between the public shim API and what executes it. The free functions in
// Runtime.cpp pick one backend per process (CARDSIM_BACKEND) and forward to it.
#pragma once

#include <memory>
#include <string>

#include "cardsim/shim.h"

namespace cardsim::shim {

class IBackend {
 public:
  virtual ~IBackend() = default;
  Status noComm(const char* what) const {
    return Status(Code::NotSupported, std::string(what) + ": the " + name() +
                                          " backend has no vendor collective library (the emulator's "
                                          "collectives run in the torch layer)");
  }
  virtual const char* name() const = 0;

  virtual Status getDeviceCount(int* count) = 0;
  virtual Status setDevice(int device) = 0;
  virtual Status getDevice(int* device) = 0;
  virtual Status getDeviceProperties(DeviceProperties* props, int device) = 0;
  virtual Status deviceSynchronize() = 0;
  // Waits for the work queued on every device (not on a stream that is capturing), at no
  // cost of a call when there is none: a recording started now replays from idle cards.
  // By default each device is synchronized.
  virtual Status waitForQueuedWork() {
    int count = 0, current = 0;
    const bool restore = getDevice(&current).ok();
    if (Status st = getDeviceCount(&count); !st.ok()) return st;
    for (int d = 0; d < count; ++d)
      if (setDevice(d).ok()) (void)deviceSynchronize();
    if (restore) (void)setDevice(current);
    return Status::Ok();
  }
  virtual Status deviceCanAccessPeer(int* can_access, int device, int peer) = 0;

  virtual Status malloc(void** ptr, std::size_t bytes) = 0;
  virtual Status free(void* ptr) = 0;
  virtual Status memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) = 0;
  virtual Status hostMalloc(void** ptr, std::size_t bytes) = 0;
  virtual Status hostFree(void* ptr) = 0;
  virtual Status hostRegister(void* ptr, std::size_t bytes) = 0;
  virtual Status hostUnregister(void* ptr) = 0;
  virtual Status pointerGetAttributes(PointerAttributes* attrs, const void* ptr) = 0;
  virtual Status memset(void* ptr, int value, std::size_t bytes, Stream stream, bool async) = 0;
  virtual Status memcpy(void* dst, const void* src, std::size_t bytes, MemcpyKind kind,
                        Stream stream, bool async) = 0;
  virtual Status memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                 std::size_t bytes, Stream stream) = 0;

  virtual Status streamCreate(Stream* stream, int priority) = 0;
  virtual Status streamDestroy(Stream stream) = 0;
  virtual Status streamSynchronize(Stream stream) = 0;
  virtual Status streamQuery(Stream stream) = 0;
  virtual Status streamGetPriority(Stream stream, int* priority) = 0;
  virtual Status streamGetDevice(Stream stream, int* device) = 0;
  virtual Status streamGetId(Stream stream, uint32_t* id) = 0;
  virtual Status streamWaitEvent(Stream stream, Event event) = 0;
  virtual Status deviceGetStreamPriorityRange(int* least, int* greatest) = 0;

  virtual Status eventCreate(Event* event, unsigned flags) = 0;
  virtual Status eventDestroy(Event event) = 0;
  virtual Status eventRecord(Event event, Stream stream) = 0;
  virtual Status eventQuery(Event event) = 0;
  virtual Status eventSynchronize(Event event) = 0;
  virtual Status eventElapsedTime(float* ms, Event start, Event end) = 0;

  virtual Status launchKernel(Stream stream, std::string_view name, const KernelCost& cost,
                              const std::function<void()>& work) = 0;

  virtual Status launchCollective(Stream stream, std::string_view name, double seconds) = 0;
  virtual Status launchHostFunc(Stream stream, std::function<void()> fn) = 0;
  virtual Status launchFabricCollective(Stream stream, const CollectiveDesc& desc, double* seconds,
                                        std::string* algorithm) = 0;

  virtual Status streamBeginCapture(Stream stream, CaptureMode mode) = 0;
  virtual Status streamEndCapture(Stream stream, Graph* graph) = 0;
  virtual Status streamIsCapturing(Stream stream, bool* capturing) = 0;
  // A stream capturing now, named ("stream 3 of device 0"), or empty if none is (or the
  // backend cannot tell): a recording neither starts nor stops inside a capture.
  virtual std::string captureInProgress() { return {}; }
  virtual Status graphNodeCount(Graph graph, std::size_t* count) = 0;
  virtual Status graphDescribe(Graph graph, std::vector<GraphNodeInfo>* nodes) = 0;
  virtual Status graphLaunch(Graph graph, Stream stream) = 0;
  virtual Status graphDestroy(Graph graph) = 0;

  virtual Status hostTimePs(uint64_t* ps) = 0;
  virtual Status hostClockShareBegin() = 0;
  virtual Status hostClockShareEnd() = 0;
  virtual Status hostClockJoin(uint64_t ps) = 0;
  virtual Status hostThreadClock(uint64_t* ps, bool* started) = 0;
  // The calling thread's outermost runtime call begins / returns (measured host time).
  virtual void hostCallBegins() {}
  virtual void hostCallReturns() {}
  // Whether it wants those two at all (read once at initialization: a call costs nothing
  // more when host time is modelled, the default).
  virtual bool measuresHostCalls() const { return false; }
  virtual Status setActivityRecording(bool on) = 0;
  virtual Status drainActivities(std::vector<ActivityRecord>* out) = 0;

  // The fabric server (shim.h); only a backend with a fabric model has one.
  virtual Status fabricServe(const std::string&, uint16_t, uint16_t*, std::string*) {
    return Status(Code::NotSupported, std::string("fabricServe: the ") + name() + " backend has no fabric model");
  }
  virtual Status fabricConnect(const std::string&, const std::string&, int, int, double) {
    return Status(Code::NotSupported, std::string("fabricConnect: the ") + name() + " backend has no fabric model");
  }
  virtual Status fabricAddress(std::string* address) {
    if (address) address->clear();
    return Status::Ok();
  }
  virtual Status fabricPark(bool) { return Status::Ok(); }
  virtual Status fabricGone(const std::vector<int>&, double, std::vector<std::pair<int, std::string>>*) {
    return Status(Code::NotSupported, "fabricGone: no fabric server");
  }
  virtual Status fabricDisconnect() { return Status::Ok(); }
  virtual Status fabricSettle() { return Status::Ok(); }

  // The vendor's collective library (shim.h, Communicators); only the native backend has one.
  virtual Status commGetUniqueId(std::string*) { return noComm("commGetUniqueId"); }
  virtual Status commInitRank(Comm*, int, const std::string&, int) { return noComm("commInitRank"); }
  virtual Status commDestroy(Comm) { return noComm("commDestroy"); }
  virtual Status commLaunch(const CommCall&, Comm, Stream) { return noComm("commLaunch"); }
  virtual Status commGroup(bool /*start*/) { return noComm("commGroupStart/End"); }

  // Timing mode's carried host data (shim.h); a backend without timing mode has none.
  virtual Status timingNoteHostWrite(const void* /*ptr*/, std::size_t /*bytes*/) { return Status::Ok(); }
  virtual Status timingScrub(void* /*ptr*/, std::size_t /*bytes*/) { return Status::Ok(); }

  // For the status board (StatusBoard.h): memory in use on `device` and its capacity and,
  // unless `busy_cluster_s` is null, its clusters' busy time so far (simulated seconds,
  // summed over clusters) and, unless `busy_memory_s` is null, its memory's (seconds some
  // traffic moved). A backend without a device model does not support it.
  virtual Status deviceUsage(int /*device*/, uint64_t* /*used*/, uint64_t* /*total*/,
                             double* /*busy_cluster_s*/, double* /*busy_memory_s*/ = nullptr) {
    return Status(Code::NotSupported, "deviceUsage: this backend has no device model");
  }
};

// The calling thread's capture mode (threadExchangeCaptureMode), for backends' checks.
CaptureMode threadCaptureMode();

// Each returns the backend, or nullptr with `why` set.
std::unique_ptr<IBackend> createSimBackend(const InitOptions& options, Status* why);
std::unique_ptr<IBackend> createNativeBackend(const InitOptions& options, Status* why);

}  // namespace cardsim::shim
