#include "native/NativeBackend.h"

#include <cstdlib>
#include <iostream>

#include "simulator/Config.h"

namespace cardsim::shim::native {


// The shim's capture: operations re-issued on the replaying stream's vendor queue.
struct NativeGraph {
  int device = 0;
  uint32_t origin_stream = 0;
  CaptureMode mode = CaptureMode::Global;
  std::vector<std::function<Status(VendorQueue)>> ops;
  std::vector<GraphNodeInfo> nodes;
  std::string broken;   // why the capture was invalidated
};
NativeGraph* nat(Graph g) { return reinterpret_cast<NativeGraph*>(g); }

namespace {

model::DeviceParams presetParams(const std::string& preset) {
  sim::SimOptions o;
  o.preset = preset;
  o.devices = 1;
  return sim::loadDeviceParams(o);
}

}  // namespace

NativeBackend::NativeBackend(std::unique_ptr<IVendorRuntime> runtime, std::string preset, int devices)
    : rt_(std::move(runtime)), preset_(std::move(preset)), devices_(devices) {
  for (int d = 0; d < devices_; ++d) {
    auto s = std::make_unique<NativeStream>();
    s->device = d;
    default_streams_.push_back(std::move(s));
  }
  next_stream_id_.assign(static_cast<size_t>(devices_), 1);
  used_bytes_.assign(static_cast<size_t>(devices_), 0);
}

NativeBackend::~NativeBackend() {
  for (NativeStream* s : streams_) delete s;
  for (NativeEvent* e : events_) delete e;
  deleteComms();
}

Status NativeBackend::currentDevice(int* device) {
  Status st = rt_->getDevice(device);
  if (st.ok() && (*device < 0 || *device >= devices_))
    return Status(Code::Internal, std::string(rt_->runtimeName()) + " reports current device " +
                                      std::to_string(*device) + " of " + std::to_string(devices_));
  return st;
}

Status NativeBackend::resolve(Stream stream, const char* what, NativeStream** out) {
  if (stream) {
    *out = nat(stream);
    return Status::Ok();
  }
  int d = 0;
  if (Status st = currentDevice(&d); !st.ok()) return Status(st.code(), std::string(what) + ": " + st.message());
  *out = default_streams_[static_cast<size_t>(d)].get();
  return Status::Ok();
}

Status NativeBackend::getDeviceCount(int* count) {
  if (!count) return nullArg("getDeviceCount", "count");
  *count = devices_;
  return Status::Ok();
}

Status NativeBackend::setDevice(int device) {
  if (device < 0 || device >= devices_)
    return Status(Code::InvalidDevice, "setDevice: device " + std::to_string(device) + " out of range (" +
                                           std::to_string(devices_) + " device(s))");
  return rt_->setDevice(device);
}

Status NativeBackend::getDevice(int* device) {
  if (!device) return nullArg("getDevice", "device");
  return currentDevice(device);
}

Status NativeBackend::getDeviceProperties(DeviceProperties* p, int device) {
  if (!p) return nullArg("getDeviceProperties", "props");
  if (device < 0 || device >= devices_)
    return Status(Code::InvalidDevice, "getDeviceProperties: device " + std::to_string(device) +
                                           " out of range (" + std::to_string(devices_) + " device(s))");
  // The model's numbers for what a runtime does not report (peak rates, links), then the
  // runtime's own for what it does.
  try {
    const model::DeviceParams params = presetParams(preset_);
    *p = DeviceProperties{};
    p->name = params.name;
    p->vendor = params.vendor;
    p->memory_bandwidth_bytes_per_s = params.memory.bandwidth_bytes_per_s;
    p->memory_technology = params.memory.technology;
    p->clock_hz = params.compute.clock_hz;
  } catch (const std::exception& e) {
    return Status(Code::InitFailed, std::string("getDeviceProperties: preset '") + preset_ + "': " + e.what());
  }
  p->preset = preset_;
  p->backend = std::string("native (") + rt_->runtimeName() + " " + rt_->version() + ", " + rt_->libraryPath() + ")";
  return rt_->deviceProperties(p, device);
}

Status NativeBackend::deviceSynchronize() {
  if (Status st = refuseWhileCapturing("deviceSynchronize"); !st.ok()) return st;
  return rt_->synchronizeDevice();
}

Status NativeBackend::deviceCanAccessPeer(int* can, int device, int peer) {
  if (!can) return nullArg("deviceCanAccessPeer", "can_access");
  return rt_->canAccessPeer(can, device, peer);
}

Status NativeBackend::refuseWhileCapturing(const char* what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (capturing_ == 0 || threadCaptureMode() == CaptureMode::Relaxed) return Status::Ok();
  return Status(Code::NotSupported, std::string(what) +
                                        ": operation not permitted while a stream is capturing");
}

Status NativeBackend::malloc(void** ptr, std::size_t bytes) {
  if (!ptr) return nullArg("malloc", "ptr");
  *ptr = nullptr;
  if (bytes == 0) return Status::Ok();
  int d = 0;
  if (Status st = currentDevice(&d); !st.ok()) return st;
  if (Status st = rt_->malloc(ptr, bytes); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mutex_);
  allocations_[*ptr] = Allocation{bytes, d};
  used_bytes_[static_cast<size_t>(d)] += bytes;
  return Status::Ok();
}

Status NativeBackend::free(void* ptr) {
  if (!ptr) return Status::Ok();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = allocations_.find(ptr);
    if (it == allocations_.end() || it->second.device < 0)
      return Status(Code::InvalidValue, "free: pointer is not the start of a device allocation");
  }
  if (Status st = rt_->free(ptr); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocations_.find(ptr);
  used_bytes_[static_cast<size_t>(it->second.device)] -= it->second.bytes;
  allocations_.erase(it);
  return Status::Ok();
}

Status NativeBackend::memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return nullArg("memGetInfo", "free/total");
  return rt_->memGetInfo(free_bytes, total_bytes);
}

Status NativeBackend::hostMalloc(void** ptr, std::size_t bytes) {
  if (!ptr) return nullArg("hostMalloc", "ptr");
  *ptr = nullptr;
  if (bytes == 0) return Status::Ok();
  if (Status st = rt_->hostMalloc(ptr, bytes); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mutex_);
  allocations_[*ptr] = Allocation{bytes, -1};
  return Status::Ok();
}

Status NativeBackend::hostFree(void* ptr) {
  if (!ptr) return Status::Ok();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = allocations_.find(ptr);
    if (it == allocations_.end() || it->second.device >= 0)
      return Status(Code::InvalidValue, "hostFree: pointer is not the start of a pinned host allocation");
  }
  if (Status st = rt_->hostFree(ptr); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mutex_);
  allocations_.erase(ptr);
  return Status::Ok();
}

Status NativeBackend::hostRegister(void* ptr, std::size_t bytes) {
  if (!ptr || bytes == 0) return Status(Code::InvalidValue, "hostRegister: null pointer or 0 bytes");
  if (Status st = rt_->hostRegister(ptr, bytes); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mutex_);
  registered_[ptr] = bytes;
  return Status::Ok();
}

Status NativeBackend::hostUnregister(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!registered_.count(ptr)) return Status(Code::InvalidValue, "hostUnregister: pointer was not registered");
  }
  if (Status st = rt_->hostUnregister(ptr); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mutex_);
  registered_.erase(ptr);
  return Status::Ok();
}

bool NativeBackend::findAllocation(const void* ptr, const void** base, Allocation* a) {
  auto in = [&](const auto& map, auto size_of) -> bool {
    auto it = map.upper_bound(ptr);
    if (it == map.begin()) return false;
    --it;
    const auto* b = static_cast<const char*>(it->first);
    if (static_cast<const char*>(ptr) >= b + size_of(it->second)) return false;
    *base = it->first;
    return true;
  };
  if (in(allocations_, [](const Allocation& x) { return x.bytes; })) {
    *a = allocations_.at(*base);
    return true;
  }
  if (in(registered_, [](std::size_t n) { return n; })) {
    *a = Allocation{registered_.at(*base), -1};
    return true;
  }
  return false;
}

Status NativeBackend::pointerGetAttributes(PointerAttributes* attrs, const void* ptr) {
  if (!attrs) return nullArg("pointerGetAttributes", "attrs");
  *attrs = PointerAttributes{};
  std::lock_guard<std::mutex> lock(mutex_);
  const void* base = nullptr;
  Allocation a;
  if (ptr && findAllocation(ptr, &base, &a)) {
    attrs->type = a.device >= 0 ? PointerAttributes::Type::Device : PointerAttributes::Type::Host;
    attrs->device = a.device;
    attrs->base = const_cast<void*>(base);
    attrs->size = a.bytes;
  }
  return Status::Ok();
}

Status NativeBackend::maybeCapture(NativeStream* s, const char* what, GraphNodeInfo info,
                                   std::function<Status(VendorQueue)> op, bool* recorded) {
  *recorded = false;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!s->capture) return Status::Ok();
  *recorded = true;
  if (!s->capture->broken.empty()) return Status(Code::InvalidValue, std::string(what) + ": the capture was invalidated");
  info.stream_id = s->id;
  s->capture->nodes.push_back(std::move(info));
  s->capture->ops.push_back(std::move(op));
  return Status::Ok();
}

Status NativeBackend::memset(void* ptr, int value, std::size_t bytes, Stream stream, bool async) {
  const char* what = async ? "memsetAsync" : "memset";
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, what, &s); !st.ok()) return st;
  if (bytes == 0) return Status::Ok();
  if (!ptr) return nullArg(what, "ptr");
  if (!async) {
    if (Status st = refuseWhileCapturing(what); !st.ok()) return st;
    if (!stream) return rt_->memset(ptr, value, bytes);
    if (Status st = rt_->memsetAsync(ptr, value, bytes, s->queue); !st.ok()) return st;
    return rt_->queueSynchronize(s->queue);
  }
  IVendorRuntime* rt = rt_.get();
  auto op = [rt, ptr, value, bytes](VendorQueue q) { return rt->memsetAsync(ptr, value, bytes, q); };
  bool recorded = false;
  GraphNodeInfo info{"memset", "memset", 0, 0, double(bytes), -1};
  if (Status st = maybeCapture(s, what, info, op, &recorded); !st.ok() || recorded) return st;
  return op(s->queue);
}

Status NativeBackend::memcpy(void* dst, const void* src, std::size_t bytes, MemcpyKind kind, Stream stream,
                             bool async) {
  const char* what = async ? "memcpyAsync" : "memcpy";
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, what, &s); !st.ok()) return st;
  if (bytes == 0) return Status::Ok();
  if (!dst || !src) return Status(Code::InvalidValue, std::string(what) + ": " + (dst ? "source" : "destination") +
                                                          " pointer is null");
  if (!async) {
    if (Status st = refuseWhileCapturing(what); !st.ok()) return st;
    if (!stream) return rt_->memcpy(dst, src, bytes, kind);
    if (Status st = rt_->memcpyAsync(dst, src, bytes, kind, s->queue); !st.ok()) return st;
    return rt_->queueSynchronize(s->queue);
  }
  IVendorRuntime* rt = rt_.get();
  auto op = [rt, dst, src, bytes, kind](VendorQueue q) { return rt->memcpyAsync(dst, src, bytes, kind, q); };
  bool recorded = false;
  const char* kname = kind == MemcpyKind::HostToDevice   ? "memcpy HtoD"
                      : kind == MemcpyKind::DeviceToHost ? "memcpy DtoH"
                                                         : "memcpy DtoD";
  GraphNodeInfo info{"memcpy", kname, 0, 0, double(bytes), -1};
  if (Status st = maybeCapture(s, what, info, op, &recorded); !st.ok() || recorded) return st;
  return op(s->queue);
}

Status NativeBackend::memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                      std::size_t bytes, Stream stream) {
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, "memcpyPeerAsync", &s); !st.ok()) return st;
  if (bytes == 0) return Status::Ok();
  IVendorRuntime* rt = rt_.get();
  auto op = [=](VendorQueue q) { return rt->memcpyPeerAsync(dst, dst_device, src, src_device, bytes, q); };
  bool recorded = false;
  GraphNodeInfo info{"memcpy", "memcpy peer", 0, 0, double(bytes), -1};
  if (Status st = maybeCapture(s, "memcpyPeerAsync", info, op, &recorded); !st.ok() || recorded) return st;
  return op(s->queue);
}

Status NativeBackend::streamCreate(Stream* out, int priority) {
  if (!out) return nullArg("streamCreate", "stream");
  int d = 0;
  if (Status st = currentDevice(&d); !st.ok()) return st;
  auto s = std::make_unique<NativeStream>();
  if (Status st = rt_->queueCreate(&s->queue, priority); !st.ok()) return st;
  s->device = d;
  if (Status st = rt_->queuePriority(s->queue, &s->priority); !st.ok()) {
    (void)rt_->queueDestroy(s->queue);
    return st;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  s->id = next_stream_id_[static_cast<size_t>(d)]++;
  streams_.insert(s.get());
  *out = handle(s.release());
  return Status::Ok();
}

Status NativeBackend::streamDestroy(Stream stream) {
  if (!stream) return Status(Code::InvalidHandle, "streamDestroy: the default stream cannot be destroyed");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!streams_.erase(nat(stream))) return Status(Code::InvalidHandle, "streamDestroy: not a live stream");
  }
  std::unique_ptr<NativeStream> s(nat(stream));
  return rt_->queueDestroy(s->queue);
}

Status NativeBackend::streamSynchronize(Stream stream) {
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, "streamSynchronize", &s); !st.ok()) return st;
  if (Status st = refuseWhileCapturing("streamSynchronize"); !st.ok()) return st;
  return rt_->queueSynchronize(s->queue);
}

Status NativeBackend::streamQuery(Stream stream) {
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, "streamQuery", &s); !st.ok()) return st;
  if (Status st = refuseWhileCapturing("streamQuery"); !st.ok()) return st;
  return rt_->queueQuery(s->queue);
}

Status NativeBackend::streamGetPriority(Stream stream, int* priority) {
  if (!priority) return nullArg("streamGetPriority", "priority");
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, "streamGetPriority", &s); !st.ok()) return st;
  if (!stream) return rt_->queuePriority(nullptr, priority);
  *priority = s->priority;
  return Status::Ok();
}

Status NativeBackend::streamGetDevice(Stream stream, int* device) {
  if (!device) return nullArg("streamGetDevice", "device");
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, "streamGetDevice", &s); !st.ok()) return st;
  *device = s->device;
  return Status::Ok();
}

Status NativeBackend::streamGetId(Stream stream, uint32_t* id) {
  if (!id) return nullArg("streamGetId", "id");
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, "streamGetId", &s); !st.ok()) return st;
  *id = s->id;
  return Status::Ok();
}

Status NativeBackend::deviceGetStreamPriorityRange(int* least, int* greatest) {
  if (!least || !greatest) return nullArg("deviceGetStreamPriorityRange", "least/greatest");
  return rt_->priorityRange(least, greatest);
}

Status NativeBackend::eventCreate(Event* out, unsigned flags) {
  if (!out) return nullArg("eventCreate", "event");
  if (flags & ~unsigned(kEventDisableTiming | kEventBlockingSync | kEventInterprocess | kEventRuntimeMarker))
    return Status(Code::InvalidValue, "eventCreate: unknown flags " + std::to_string(flags));
  flags &= ~unsigned(kEventRuntimeMarker);   // the real runtime's events cost what they cost
  auto e = std::make_unique<NativeEvent>();
  e->flags = flags;
  if (Status st = rt_->notifierCreate(&e->notifier, flags); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mutex_);
  events_.insert(e.get());
  *out = handle(e.release());
  return Status::Ok();
}

Status NativeBackend::eventDestroy(Event event) {
  if (!event) return Status(Code::InvalidHandle, "eventDestroy: null event");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!events_.erase(nat(event))) return Status(Code::InvalidHandle, "eventDestroy: not a live event");
  }
  std::unique_ptr<NativeEvent> e(nat(event));
  return rt_->notifierDestroy(e->notifier);
}

Status NativeBackend::eventRecord(Event event, Stream stream) {
  if (!event) return Status(Code::InvalidHandle, "eventRecord: null event");
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, "eventRecord", &s); !st.ok()) return st;
  NativeEvent* e = nat(event);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (s->capture) {
      // Inside a capture an event marks a point of the graph; only the capturing stream
      // itself may wait for it (the replay keeps one queue's order).
      e->captured_in = s->id;
      return Status::Ok();
    }
    e->captured_in = 0;
  }
  return rt_->notifierRecord(e->notifier, s->queue);
}

Status NativeBackend::streamWaitEvent(Stream stream, Event event) {
  if (!event) return Status(Code::InvalidHandle, "streamWaitEvent: null event");
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, "streamWaitEvent", &s); !st.ok()) return st;
  NativeEvent* e = nat(event);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (e->captured_in != 0) {
      if (s->capture && s->id == e->captured_in) return Status::Ok();   // already in order
      return Status(Code::NotSupported,
                    "streamWaitEvent: the native backend captures one stream only; waiting on "
                    "another stream for an event recorded in a capture would fork it");
    }
    if (s->capture) {
      // Waiting inside a capture on work queued before it: that work precedes every replay
      // once the capture has ended, so nothing is recorded.
      return Status::Ok();
    }
  }
  return rt_->queueWaitNotifier(s->queue, e->notifier);
}

Status NativeBackend::eventQuery(Event event) {
  if (!event) return Status(Code::InvalidHandle, "eventQuery: null event");
  if (Status st = refuseWhileCapturing("eventQuery"); !st.ok()) return st;
  return rt_->notifierQuery(nat(event)->notifier);
}

Status NativeBackend::eventSynchronize(Event event) {
  if (!event) return Status(Code::InvalidHandle, "eventSynchronize: null event");
  if (Status st = refuseWhileCapturing("eventSynchronize"); !st.ok()) return st;
  return rt_->notifierSynchronize(nat(event)->notifier);
}

Status NativeBackend::eventElapsedTime(float* ms, Event start, Event end) {
  if (!ms) return nullArg("eventElapsedTime", "ms");
  if (!start || !end) return Status(Code::InvalidHandle, "eventElapsedTime: null event");
  if ((nat(start)->flags | nat(end)->flags) & kEventDisableTiming)
    return Status(Code::InvalidValue, "eventElapsedTime: an event was created with timing disabled");
  return rt_->notifierElapsedMs(ms, nat(start)->notifier, nat(end)->notifier);
}

Status NativeBackend::runOnHost(NativeStream* s, const char* what, const std::function<void()>& work) {
  // The host runs the work once everything queued before it has finished.
  if (Status st = rt_->queueSynchronize(s->queue); !st.ok()) return st;
  try {
    if (work) work();
  } catch (const std::exception& e) {
    return Status(Code::KernelFailed, std::string(what) + " failed: " + e.what());
  } catch (...) {
    return Status(Code::KernelFailed, std::string(what) + " failed");
  }
  return Status::Ok();
}

Status NativeBackend::launchKernel(Stream stream, std::string_view name, const KernelCost& cost,
                                   const std::function<void()>& work) {
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, "launchKernel", &s); !st.ok()) return st;
  const std::string what = "kernel '" + std::string(name) + "'";
  bool recorded = false;
  GraphNodeInfo info{std::string(name), "kernel", 0, cost.flops, cost.bytes_read + cost.bytes_written, -1};
  auto op = [this, s, what, work](VendorQueue q) {
    NativeStream replay = *s;
    replay.queue = q;
    return runOnHost(&replay, what.c_str(), work);
  };
  if (Status st = maybeCapture(s, "launchKernel", info, op, &recorded); !st.ok() || recorded) return st;
  return runOnHost(s, what.c_str(), work);
}

Status NativeBackend::launchCollective(Stream stream, std::string_view, double) {
  NativeStream* s = nullptr;
  return resolve(stream, "launchCollective", &s);   // no time to charge: nothing is simulated
}

Status NativeBackend::launchHostFunc(Stream stream, std::function<void()> fn) {
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, "launchHostFunc", &s); !st.ok()) return st;
  bool recorded = false;
  GraphNodeInfo info{"host function", "host", 0, 0, 0, -1};
  auto op = [this, s, fn](VendorQueue q) {
    NativeStream replay = *s;
    replay.queue = q;
    return runOnHost(&replay, "host function", fn);
  };
  if (Status st = maybeCapture(s, "launchHostFunc", info, op, &recorded); !st.ok() || recorded) return st;
  return runOnHost(s, "host function", fn);
}

Status NativeBackend::launchFabricCollective(Stream stream, const CollectiveDesc&, double* seconds,
                                             std::string* algorithm) {
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, "launchFabricCollective", &s); !st.ok()) return st;
  if (seconds) *seconds = 0;   // a real card's collective takes real time, not modelled time
  if (algorithm) *algorithm = "native";
  return Status::Ok();
}

Status NativeBackend::streamBeginCapture(Stream stream, CaptureMode mode) {
  if (!stream) return Status(Code::InvalidValue, "streamBeginCapture: the default stream cannot be captured");
  NativeStream* s = nat(stream);
  std::lock_guard<std::mutex> lock(mutex_);
  if (s->capture)
    return Status(Code::InvalidValue, "streamBeginCapture: stream " + std::to_string(s->id) + " is already capturing");
  s->capture = std::make_shared<NativeGraph>();
  s->capture->device = s->device;
  s->capture->origin_stream = s->id;
  s->capture->mode = mode;
  if (mode != CaptureMode::Relaxed) ++capturing_;
  return Status::Ok();
}

Status NativeBackend::streamEndCapture(Stream stream, Graph* graph) {
  if (!graph) return nullArg("streamEndCapture", "graph");
  *graph = nullptr;
  if (!stream) return Status(Code::InvalidValue, "streamEndCapture: the default stream never captures");
  NativeStream* s = nat(stream);
  std::shared_ptr<NativeGraph> g;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!s->capture)
      return Status(Code::InvalidValue, "streamEndCapture: stream " + std::to_string(s->id) + " is not capturing");
    g = std::move(s->capture);
    if (g->mode != CaptureMode::Relaxed) --capturing_;
  }
  if (!g->broken.empty()) return Status(Code::InvalidValue, "streamEndCapture: capture invalidated: " + g->broken);
  *graph = reinterpret_cast<Graph>(new NativeGraph(std::move(*g)));
  return Status::Ok();
}

Status NativeBackend::streamIsCapturing(Stream stream, bool* capturing) {
  if (!capturing) return nullArg("streamIsCapturing", "capturing");
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, "streamIsCapturing", &s); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mutex_);
  *capturing = s->capture != nullptr;
  return Status::Ok();
}

Status NativeBackend::graphNodeCount(Graph graph, std::size_t* count) {
  if (!graph || !count) return Status(Code::InvalidValue, "graphNodeCount: null graph or count");
  *count = nat(graph)->ops.size();
  return Status::Ok();
}

Status NativeBackend::graphDescribe(Graph graph, std::vector<GraphNodeInfo>* nodes) {
  if (!graph || !nodes) return Status(Code::InvalidValue, "graphDescribe: null graph or nodes");
  *nodes = nat(graph)->nodes;
  return Status::Ok();
}

Status NativeBackend::graphLaunch(Graph graph, Stream stream) {
  if (!graph) return Status(Code::InvalidHandle, "graphLaunch: null graph");
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, "graphLaunch", &s); !st.ok()) return st;
  for (std::size_t i = 0; i < nat(graph)->ops.size(); ++i) {
    if (Status st = nat(graph)->ops[i](s->queue); !st.ok())
      return Status(st.code(), "graphLaunch: node " + std::to_string(i) + " (" + nat(graph)->nodes[i].name +
                                   "): " + st.message());
  }
  return Status::Ok();
}

Status NativeBackend::graphDestroy(Graph graph) {
  delete nat(graph);
  return Status::Ok();
}

Status NativeBackend::hostTimePs(uint64_t* ps) {
  if (!ps) return nullArg("hostTimePs", "ps");
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_);
  *ps = static_cast<uint64_t>(ns.count()) * 1000;
  return Status::Ok();
}

Status NativeBackend::hostThreadClock(uint64_t* ps, bool* started) {
  if (started) *started = true;
  return hostTimePs(ps);
}

Status NativeBackend::drainActivities(std::vector<ActivityRecord>* out) {
  if (out) out->clear();   // a real card's activities come from the vendor's profiler
  return Status::Ok();
}

Status NativeBackend::deviceUsage(int device, uint64_t* used, uint64_t* total, double* busy, double* busy_memory) {
  if (device < 0 || device >= devices_) return Status(Code::InvalidDevice, "deviceUsage: no device " + std::to_string(device));
  DeviceProperties p;
  if (Status st = rt_->deviceProperties(&p, device); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mutex_);
  if (used) *used = used_bytes_[static_cast<size_t>(device)];
  if (total) *total = p.total_memory_bytes;
  if (busy) *busy = 0;   // no model of the clusters
  if (busy_memory) *busy_memory = 0;   // nor of the memory
  return Status::Ok();
}

}  // namespace cardsim::shim::native

namespace cardsim::shim {

std::unique_ptr<IBackend> createNativeBackend(const InitOptions& options, Status* why) {
  std::string preset = options.preset;
  if (preset.empty()) {
    const char* env = std::getenv("CARDSIM_PRESET");
    preset = env && *env ? env : "mlu370-x8";
  }
  std::string vendor;
  try {
    vendor = native::presetParams(preset).vendor;
  } catch (const std::exception& e) {
    *why = Status(Code::InitFailed, std::string("native backend: ") + e.what());
    return nullptr;
  }
  std::unique_ptr<native::IVendorRuntime> rt;
  if (vendor == "Cambricon") {
    rt = native::openCnrt(why);
  } else if (vendor == "Biren") {
    rt = native::openSupaRuntime(why);
  } else {
    *why = Status(Code::InitFailed, "native backend: preset '" + preset + "' is a " + vendor +
                                        " card; cardsim binds only Cambricon's CNRT and Biren's SUPA runtime");
    return nullptr;
  }
  if (!rt) return nullptr;
  int count = 0;
  if (Status st = rt->deviceCount(&count); !st.ok()) {
    *why = Status(Code::InitFailed, "native backend: " + st.message());
    return nullptr;
  }
  if (count <= 0) {
    *why = Status(Code::InitFailed, std::string("native backend: ") + rt->runtimeName() + " (" +
                                        rt->libraryPath() + ") reports no device");
    return nullptr;
  }
  return std::make_unique<native::NativeBackend>(std::move(rt), preset, count);
}

}  // namespace cardsim::shim
