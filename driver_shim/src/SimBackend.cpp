// The `sim` backend: the shim's calls on the in-process SystemC model.
#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>

#include "Backend.h"
#include "DeviceMemory.h"
#include "simulator/Simulator.h"

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
  // Stream capture: while `capture` is set, work is recorded into it instead of run.
  std::unique_ptr<GraphObject> capture;
  std::atomic<bool> capturing{false};  // capture != nullptr, readable without the lock
  std::string capture_broken;  // why the capture was invalidated, if it was
};

// One recorded operation: its functional effect and its command for the model.
struct GraphNode {
  std::string name;
  std::function<void()> work;
  model::Command cmd;
};

struct GraphObject {
  std::atomic<bool> alive{true};
  int device = 0;
  std::vector<GraphNode> nodes;
};

struct EventObject {
  unsigned flags = 0;
  std::atomic<bool> alive{true};
  std::mutex mutex;
  bool recorded = false;
  int device = -1;
  model::QueuePoint point;
  std::shared_ptr<model::EventSlot> slot;
};

namespace {

using sim::Simulator;
using model::CommandKind;
using model::DeviceId;
using model::QueueId;

thread_local int t_current_device = 0;

Status invalidDevice(int device, int count) {
  return Status(Code::InvalidDevice, "invalid device " + std::to_string(device) + ": " +
                                         std::to_string(count) + " device(s) present (0.." +
                                         std::to_string(count - 1) + ")");
}

model::DType toModel(DataType t) {
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

model::KernelClass toModel(KernelClass k) {
  switch (k) {
    case KernelClass::Gemm: return model::KernelClass::Gemm;
    case KernelClass::Elementwise: return model::KernelClass::Elementwise;
    case KernelClass::Reduction: return model::KernelClass::Reduction;
    case KernelClass::Other: return model::KernelClass::Other;
  }
  return model::KernelClass::Other;
}

const char* memcpyKindName(MemcpyKind k) {
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
  explicit SimBackend(Simulator& sim)
      : sim_(sim), params_(sim.params()), devices_(static_cast<int>(sim.deviceCount())),
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
  }

  const char* name() const override { return "sim"; }

  // ---- devices
  Status getDeviceCount(int* count) override {
    if (!count) return nullArg("getDeviceCount", "count");
    *count = devices_;
    return Status::Ok();
  }
  Status setDevice(int device) override {
    if (device < 0 || device >= devices_) return invalidDevice(device, devices_);
    t_current_device = device;
    return Status::Ok();
  }
  Status getDevice(int* device) override {
    if (!device) return nullArg("getDevice", "device");
    *device = t_current_device;
    return Status::Ok();
  }
  Status getDeviceProperties(DeviceProperties* p, int device) override {
    if (!p) return nullArg("getDeviceProperties", "props");
    if (device < 0 || device >= devices_) return invalidDevice(device, devices_);
    const auto& c = params_.compute;
    auto peak = [&](model::DType t) { return c.peak_ops_per_s[static_cast<size_t>(t)]; };
    p->name = params_.name;
    p->vendor = params_.vendor;
    p->preset = params_.preset;
    p->total_memory_bytes = params_.memory.capacity_bytes;
    p->cluster_count = c.clusters;
    p->cores_per_cluster = c.cores_per_cluster;
    p->clock_hz = c.clock_hz;
    p->memory_bandwidth_bytes_per_s = params_.memory.bandwidth_bytes_per_s;
    p->memory_technology = params_.memory.technology;
    p->peak_fp64_flops = peak(model::DType::FP64);
    p->peak_fp32_flops = peak(model::DType::FP32);
    p->peak_tf32_flops = peak(model::DType::TF32);
    p->peak_fp16_flops = peak(model::DType::FP16);
    p->peak_bf16_flops = peak(model::DType::BF16);
    p->peak_int8_ops = peak(model::DType::INT8);
    p->compute_capability_major = params_.compute_capability_major;
    p->compute_capability_minor = params_.compute_capability_minor;
    p->pcie_generation = params_.host_link.pcie_generation;
    p->pcie_lanes = params_.host_link.lanes;
    p->host_link_bandwidth_bytes_per_s = params_.host_link.bandwidth_bytes_per_s;
    p->host_link_latency_s = params_.host_link.latency_s;
    p->dma_engines = params_.dma.engines;
    p->hardware_queues = params_.queues.hardware_queues;
    return Status::Ok();
  }
  Status deviceSynchronize() override {
    {
      std::lock_guard<std::mutex> lock(streams_mutex_);
      for (auto& st : streams_)
        if (st->alive && st->device == t_current_device && capturing(st.get()))
          return breakCapture(st.get(), "deviceSynchronize");
    }
    return guard([&] {
      sim_.waitFor(sim_.deviceTails(dev(t_current_device)), params_.host.sync_overhead_s);
      return Status::Ok();
    });
  }
  Status deviceCanAccessPeer(int* can, int device, int peer) override {
    if (!can) return nullArg("deviceCanAccessPeer", "can_access");
    if (device < 0 || device >= devices_) return invalidDevice(device, devices_);
    if (peer < 0 || peer >= devices_) return invalidDevice(peer, devices_);
    *can = device != peer ? 1 : 0;   // every pair shares a PCIe root in the model
    return Status::Ok();
  }

  // ---- memory
  Status malloc(void** ptr, std::size_t bytes) override {
    if (!ptr) return nullArg("malloc", "ptr");
    sim_.hostAdvance(params_.host.alloc_overhead_s);
    return memory_.allocate(t_current_device, bytes, ptr);
  }
  Status free(void* ptr) override {
    if (!ptr) return Status::Ok();
    DeviceMemory::Found f;
    if (!memory_.find(ptr, &f) || !f.device_memory || f.base != ptr)
      return memory_.release(ptr, nullptr);  // produces the error message
    // Vendor runtimes synchronize the device before releasing memory.
    Status s = guard([&] {
      sim_.waitFor(sim_.deviceTails(dev(f.device)), params_.host.alloc_overhead_s);
      return Status::Ok();
    });
    if (!s.ok()) return s;
    return memory_.release(ptr, nullptr);
  }
  Status memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) override {
    if (!free_bytes || !total_bytes) return nullArg("memGetInfo", "free/total");
    const uint64_t cap = memory_.capacity(t_current_device);
    *total_bytes = cap;
    *free_bytes = cap - memory_.used(t_current_device);
    return Status::Ok();
  }
  Status hostMalloc(void** ptr, std::size_t bytes) override {
    if (!ptr) return nullArg("hostMalloc", "ptr");
    sim_.hostAdvance(params_.host.alloc_overhead_s);
    return memory_.hostAllocate(bytes, ptr);
  }
  Status hostFree(void* ptr) override { return memory_.hostRelease(ptr); }
  Status hostRegister(void* ptr, std::size_t bytes) override {
    sim_.hostAdvance(params_.host.alloc_overhead_s);
    return memory_.hostRegister(ptr, bytes);
  }
  Status hostUnregister(void* ptr) override { return memory_.hostUnregister(ptr); }
  Status pointerGetAttributes(PointerAttributes* a, const void* ptr) override {
    if (!a) return nullArg("pointerGetAttributes", "attrs");
    *a = PointerAttributes{};
    DeviceMemory::Found f;
    if (ptr && memory_.find(ptr, &f)) {
      a->type = f.device_memory ? PointerAttributes::Type::Device : PointerAttributes::Type::Host;
      a->device = f.device;
      a->base = f.base;
      a->size = f.size;
    }
    return Status::Ok();
  }

  Status memset(void* ptr, int value, std::size_t bytes, Stream stream, bool async) override {
    const char* what = async ? "memsetAsync" : "memset";
    StreamObject* s = nullptr;
    if (Status st = resolve(stream, what, &s); !st.ok()) return st;
    DeviceMemory::Found f;
    if (bytes > 0) {
      if (Status st = checkDeviceRange(what, "destination", ptr, bytes, &f); !st.ok()) return st;
    }
    model::Command cmd;
    cmd.kind = CommandKind::Copy;
    cmd.copy_kind = model::CopyKind::Memset;
    cmd.bytes = bytes;
    auto work = [ptr, value, bytes] {
      if (bytes > 0) std::memset(ptr, value, bytes);
    };
    if (capturing(s)) {
      if (!async) return breakCapture(s, what);
      return record(s, "memset", work, std::move(cmd));
    }
    work();
    return submitAndMaybeWait(s, std::move(cmd), "memset", params_.host.memcpy_overhead_s, !async);
  }

  Status memcpy(void* dst, const void* src, std::size_t bytes, MemcpyKind kind, Stream stream,
                bool async) override {
    const char* what = async ? "memcpyAsync" : "memcpy";
    StreamObject* s = nullptr;
    if (Status st = resolve(stream, what, &s); !st.ok()) return st;
    if (bytes == 0) return Status::Ok();
    if (!dst || !src)
      return Status(Code::InvalidValue, std::string(what) + ": " + (dst ? "source" : "destination") +
                                            " pointer is null");
    DeviceMemory::Found fs, fd;
    const bool src_dev = memory_.find(src, &fs) && fs.device_memory;
    const bool dst_dev = memory_.find(dst, &fd) && fd.device_memory;
    if (kind == MemcpyKind::Default) {
      kind = src_dev ? (dst_dev ? MemcpyKind::DeviceToDevice : MemcpyKind::DeviceToHost)
                     : (dst_dev ? MemcpyKind::HostToDevice : MemcpyKind::HostToHost);
    }
    const bool want_src_dev = kind == MemcpyKind::DeviceToHost || kind == MemcpyKind::DeviceToDevice;
    const bool want_dst_dev = kind == MemcpyKind::HostToDevice || kind == MemcpyKind::DeviceToDevice;
    if (want_src_dev) {
      if (Status st = checkDeviceRange(what, "source", src, bytes, &fs); !st.ok()) return st;
    } else if (src_dev) {
      return Status(Code::InvalidValue, std::string(what) + " " + memcpyKindName(kind) +
                                            ": source is device memory of device " +
                                            std::to_string(fs.device));
    }
    if (want_dst_dev) {
      if (Status st = checkDeviceRange(what, "destination", dst, bytes, &fd); !st.ok()) return st;
    } else if (dst_dev) {
      return Status(Code::InvalidValue, std::string(what) + " " + memcpyKindName(kind) +
                                            ": destination is device memory of device " +
                                            std::to_string(fd.device));
    }
    if (kind == MemcpyKind::HostToHost) {
      if (capturing(s)) return breakCapture(s, "memcpy HostToHost");
      std::memmove(dst, src, bytes);
      return Status::Ok();
    }

    model::Command cmd;
    cmd.kind = CommandKind::Copy;
    cmd.bytes = bytes;
    bool pageable = false;
    if (kind == MemcpyKind::HostToDevice) {
      cmd.copy_kind = model::CopyKind::HostToDevice;
      pageable = !isPinned(src);
    } else if (kind == MemcpyKind::DeviceToHost) {
      cmd.copy_kind = model::CopyKind::DeviceToHost;
      pageable = !isPinned(dst);
    } else if (fs.device != fd.device) {
      cmd.copy_kind = model::CopyKind::PeerToPeer;
      const bool on_src = s->device == fs.device;
      cmd.peer = dev(on_src ? fd.device : fs.device);
      cmd.peer_is_source = !on_src;
      if (s->device != fs.device && s->device != fd.device)
        return Status(Code::InvalidValue, std::string(what) + ": stream of device " +
                                              std::to_string(s->device) +
                                              " cannot copy between devices " +
                                              std::to_string(fs.device) + " and " +
                                              std::to_string(fd.device));
    } else {
      cmd.copy_kind = model::CopyKind::DeviceToDevice;
    }
    cmd.pageable = pageable;
    auto work = [dst, src, bytes] { std::memmove(dst, src, bytes); };
    const char* label = model::copyKindName(cmd.copy_kind);
    if (capturing(s)) {
      if (!async) return breakCapture(s, what);
      return record(s, label, work, std::move(cmd));
    }
    work();
    // Copies from or to pageable host memory are staged and block the host, as on the card.
    const bool wait = !async || pageable;
    return submitAndMaybeWait(s, std::move(cmd), label, params_.host.memcpy_overhead_s, wait);
  }

  Status memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                         std::size_t bytes, Stream stream) override {
    if (dst_device < 0 || dst_device >= devices_) return invalidDevice(dst_device, devices_);
    if (src_device < 0 || src_device >= devices_) return invalidDevice(src_device, devices_);
    DeviceMemory::Found f;
    if (bytes > 0) {
      if (Status st = checkDeviceRange("memcpyPeerAsync", "source", src, bytes, &f); !st.ok()) return st;
      if (f.device != src_device)
        return Status(Code::InvalidValue, "memcpyPeerAsync: source is on device " +
                                              std::to_string(f.device) + ", not " +
                                              std::to_string(src_device));
      if (Status st = checkDeviceRange("memcpyPeerAsync", "destination", dst, bytes, &f); !st.ok()) return st;
      if (f.device != dst_device)
        return Status(Code::InvalidValue, "memcpyPeerAsync: destination is on device " +
                                              std::to_string(f.device) + ", not " +
                                              std::to_string(dst_device));
    }
    return memcpy(dst, src, bytes, MemcpyKind::DeviceToDevice, stream, true);
  }

  // ---- streams
  Status streamCreate(Stream* out, int priority) override {
    if (!out) return nullArg("streamCreate", "stream");
    const int d = t_current_device;
    auto s = std::make_unique<StreamObject>();
    s->device = d;
    s->priority = clampPriority(priority);
    s->rank = rankOf(s->priority);
    {
      std::lock_guard<std::mutex> lock(streams_mutex_);
      s->id = next_stream_id_++;
      // Queue 0 is the default stream's; created streams take the others in turn.
      const uint32_t q = params_.queues.hardware_queues;
      s->queue = QueueId{q == 1 ? 0 : 1 + (next_queue_[static_cast<size_t>(d)]++ % (q - 1))};
      s->last = {dev(d), s->queue, 0};   // nothing queued yet: synchronizing returns at once
      *out = s.get();
      streams_.push_back(std::move(s));   // kept: a destroyed handle must still be checkable
    }
    return Status::Ok();
  }
  Status streamDestroy(Stream stream) override {
    if (!stream) return Status(Code::InvalidHandle, "streamDestroy: the default stream cannot be destroyed");
    if (Status st = checkStream(stream, "streamDestroy"); !st.ok()) return st;
    stream->alive = false;
    return Status::Ok();
  }
  Status streamSynchronize(Stream stream) override {
    StreamObject* s = nullptr;
    if (Status st = resolve(stream, "streamSynchronize", &s); !st.ok()) return st;
    if (capturing(s)) return breakCapture(s, "streamSynchronize");
    return guard([&] {
      sim_.waitFor({lastOf(s)}, params_.host.sync_overhead_s);
      return Status::Ok();
    });
  }
  Status streamQuery(Stream stream) override {
    StreamObject* s = nullptr;
    if (Status st = resolve(stream, "streamQuery", &s); !st.ok()) return st;
    if (capturing(s)) return breakCapture(s, "streamQuery");
    return guard([&] {
      return sim_.query({lastOf(s)}, params_.host.query_overhead_s)
                 ? Status::Ok()
                 : Status(Code::NotReady, "stream " + std::to_string(s->id) + " has work pending");
    });
  }
  Status streamGetPriority(Stream stream, int* priority) override {
    StreamObject* s = nullptr;
    if (Status st = resolve(stream, "streamGetPriority", &s); !st.ok()) return st;
    if (!priority) return nullArg("streamGetPriority", "priority");
    *priority = s->priority;
    return Status::Ok();
  }
  Status streamGetDevice(Stream stream, int* device) override {
    StreamObject* s = nullptr;
    if (Status st = resolve(stream, "streamGetDevice", &s); !st.ok()) return st;
    if (!device) return nullArg("streamGetDevice", "device");
    *device = s->device;
    return Status::Ok();
  }
  Status streamGetId(Stream stream, uint32_t* id) override {
    StreamObject* s = nullptr;
    if (Status st = resolve(stream, "streamGetId", &s); !st.ok()) return st;
    if (!id) return nullArg("streamGetId", "id");
    *id = s->id;
    return Status::Ok();
  }
  Status streamWaitEvent(Stream stream, Event event) override {
    StreamObject* s = nullptr;
    if (Status st = resolve(stream, "streamWaitEvent", &s); !st.ok()) return st;
    if (Status st = checkEvent(event, "streamWaitEvent"); !st.ok()) return st;
    if (capturing(s)) return breakCapture(s, "streamWaitEvent (events in a capture are not supported yet)");
    model::QueuePoint point;
    {
      std::lock_guard<std::mutex> lock(event->mutex);
      if (!event->recorded) return Status::Ok();   // waiting on a never-recorded event is a no-op
      point = event->point;
    }
    model::Command cmd;
    cmd.kind = CommandKind::EventWait;
    cmd.wait_for = point;
    return submitAndMaybeWait(s, std::move(cmd), "event wait", params_.host.event_overhead_s, false);
  }
  Status deviceGetStreamPriorityRange(int* least, int* greatest) override {
    if (!least || !greatest) return nullArg("deviceGetStreamPriorityRange", "least/greatest");
    *least = params_.queues.priority_least;
    *greatest = params_.queues.priority_greatest;
    return Status::Ok();
  }

  // ---- events
  Status eventCreate(Event* out, unsigned flags) override {
    if (!out) return nullArg("eventCreate", "event");
    if (flags & ~unsigned(kEventDisableTiming | kEventBlockingSync | kEventInterprocess))
      return Status(Code::InvalidValue, "eventCreate: unknown flags 0x" + hex(flags));
    if ((flags & kEventInterprocess) && !(flags & kEventDisableTiming))
      return Status(Code::InvalidValue, "eventCreate: an interprocess event must also disable timing");
    auto e = std::make_unique<EventObject>();
    e->flags = flags;
    std::lock_guard<std::mutex> lock(streams_mutex_);
    *out = e.get();
    events_.push_back(std::move(e));
    return Status::Ok();
  }
  Status eventDestroy(Event event) override {
    if (Status st = checkEvent(event, "eventDestroy"); !st.ok()) return st;
    event->alive = false;
    return Status::Ok();
  }
  Status eventRecord(Event event, Stream stream) override {
    if (Status st = checkEvent(event, "eventRecord"); !st.ok()) return st;
    StreamObject* s = nullptr;
    if (Status st = resolve(stream, "eventRecord", &s); !st.ok()) return st;
    if (capturing(s)) return breakCapture(s, "eventRecord (events in a capture are not supported yet)");
    auto slot = std::make_shared<model::EventSlot>();
    model::Command cmd;
    cmd.kind = CommandKind::EventRecord;
    cmd.event = slot;
    model::QueuePoint p;
    Status st = submit(s, std::move(cmd), "event record", params_.host.event_overhead_s, &p);
    if (!st.ok()) return st;
    std::lock_guard<std::mutex> lock(event->mutex);
    event->recorded = true;
    event->device = s->device;
    event->point = p;
    event->slot = std::move(slot);
    return Status::Ok();
  }
  Status eventQuery(Event event) override {
    if (Status st = checkEvent(event, "eventQuery"); !st.ok()) return st;
    model::QueuePoint p;
    if (!pointOf(event, &p)) return Status::Ok();
    return guard([&] {
      return sim_.query({p}, params_.host.query_overhead_s)
                 ? Status::Ok()
                 : Status(Code::NotReady, "event not reached yet");
    });
  }
  Status eventSynchronize(Event event) override {
    if (Status st = checkEvent(event, "eventSynchronize"); !st.ok()) return st;
    model::QueuePoint p;
    if (!pointOf(event, &p)) return Status::Ok();
    return guard([&] {
      sim_.waitFor({p}, params_.host.sync_overhead_s);
      return Status::Ok();
    });
  }
  Status eventElapsedTime(float* ms, Event start, Event end) override {
    if (!ms) return nullArg("eventElapsedTime", "ms");
    if (Status st = checkEvent(start, "eventElapsedTime"); !st.ok()) return st;
    if (Status st = checkEvent(end, "eventElapsedTime"); !st.ok()) return st;
    if ((start->flags | end->flags) & kEventDisableTiming)
      return Status(Code::InvalidHandle, "eventElapsedTime: an event was created with timing disabled");
    model::QueuePoint a, b;
    std::shared_ptr<model::EventSlot> sa, sb;
    {
      std::lock_guard<std::mutex> la(start->mutex);
      if (!start->recorded)
        return Status(Code::InvalidHandle, "eventElapsedTime: the start event was never recorded");
      a = start->point;
      sa = start->slot;
    }
    {
      std::lock_guard<std::mutex> lb(end->mutex);
      if (!end->recorded)
        return Status(Code::InvalidHandle, "eventElapsedTime: the end event was never recorded");
      b = end->point;
      sb = end->slot;
    }
    return guard([&] {
      if (!sim_.query({a, b}, params_.host.query_overhead_s))
        return Status(Code::NotReady, "eventElapsedTime: an event has not been reached yet");
      const double diff_ps = static_cast<double>(sb->time_ps.load()) -
                             static_cast<double>(sa->time_ps.load());
      *ms = static_cast<float>(diff_ps * 1e-9);
      return Status::Ok();
    });
  }

  // ---- kernels
  Status launchKernel(Stream stream, std::string_view kname, const KernelCost& cost,
                      const std::function<void()>& work) override {
    StreamObject* s = nullptr;
    if (Status st = resolve(stream, "launchKernel", &s); !st.ok()) return st;
    if (cost.flops < 0 || cost.bytes_read < 0 || cost.bytes_written < 0)
      return Status(Code::InvalidValue, "launchKernel '" + std::string(kname) +
                                            "': negative flops or bytes in the cost");
    const size_t dt = static_cast<size_t>(toModel(cost.dtype));
    if (cost.flops > 0 && params_.compute.peak_ops_per_s[dt] <= 0)
      return Status(Code::NotSupported,
                    "launchKernel '" + std::string(kname) + "': " + params_.name + " (preset " +
                        params_.preset + ") has no " + model::dtypeName(toModel(cost.dtype)) +
                        " throughput (compute.peak." + model::dtypeName(toModel(cost.dtype)) + " is 0)");
    model::Command cmd;
    cmd.kind = CommandKind::Kernel;
    cmd.kernel.kernel_class = toModel(cost.kernel_class);
    cmd.kernel.dtype = toModel(cost.dtype);
    cmd.kernel.flops = cost.flops;
    cmd.kernel.bytes_read = cost.bytes_read;
    cmd.kernel.bytes_written = cost.bytes_written;
    cmd.kernel.tiles = cost.tiles;
    if (capturing(s)) return record(s, kname, work, std::move(cmd));
    if (work) {
      try {
        work();
      } catch (const std::exception& e) {
        return Status(Code::KernelFailed, "kernel '" + std::string(kname) + "' failed: " + e.what());
      } catch (...) {
        return Status(Code::KernelFailed, "kernel '" + std::string(kname) + "' failed");
      }
    }
    return submitAndMaybeWait(s, std::move(cmd), kname, params_.host.launch_overhead_s, false);
  }

  Status launchCollective(Stream stream, std::string_view cname, double seconds) override {
    StreamObject* s = nullptr;
    if (Status st = resolve(stream, "launchCollective", &s); !st.ok()) return st;
    if (!(seconds >= 0))
      return Status(Code::InvalidValue, "launchCollective '" + std::string(cname) +
                                            "': duration must be a non-negative number of seconds");
    model::Command cmd;
    cmd.kind = CommandKind::Collective;
    cmd.duration_ps = model::secondsToPs(seconds);
    if (capturing(s)) return record(s, cname, nullptr, std::move(cmd));
    return submitAndMaybeWait(s, std::move(cmd), cname, params_.host.launch_overhead_s, false);
  }

  // ---- graphs
  Status streamBeginCapture(Stream stream) override {
    if (!stream)
      return Status(Code::InvalidValue, "streamBeginCapture: the default stream cannot be captured");
    if (Status st = checkStream(stream, "streamBeginCapture"); !st.ok()) return st;
    std::lock_guard<std::mutex> lock(stream->mutex);
    if (stream->capture)
      return Status(Code::InvalidValue, "streamBeginCapture: stream " + std::to_string(stream->id) +
                                            " is already capturing");
    stream->capture = std::make_unique<GraphObject>();
    stream->capture->device = stream->device;
    stream->capturing = true;
    stream->capture_broken.clear();
    return Status::Ok();
  }
  Status streamEndCapture(Stream stream, Graph* graph) override {
    if (!graph) return nullArg("streamEndCapture", "graph");
    *graph = nullptr;
    if (!stream) return Status(Code::InvalidValue, "streamEndCapture: the default stream never captures");
    if (Status st = checkStream(stream, "streamEndCapture"); !st.ok()) return st;
    std::unique_ptr<GraphObject> g;
    std::string broken;
    {
      std::lock_guard<std::mutex> lock(stream->mutex);
      if (!stream->capture && stream->capture_broken.empty())
        return Status(Code::InvalidValue, "streamEndCapture: stream " + std::to_string(stream->id) +
                                              " is not capturing");
      g = std::move(stream->capture);
      stream->capturing = false;
      broken.swap(stream->capture_broken);
    }
    if (!broken.empty())
      return Status(Code::InvalidValue, "streamEndCapture: the capture was invalidated by " + broken);
    std::lock_guard<std::mutex> lock(streams_mutex_);
    *graph = g.get();
    graphs_.push_back(std::move(g));
    return Status::Ok();
  }
  Status streamIsCapturing(Stream stream, bool* is) override {
    if (!is) return nullArg("streamIsCapturing", "capturing");
    StreamObject* s = nullptr;
    if (Status st = resolve(stream, "streamIsCapturing", &s); !st.ok()) return st;
    *is = capturing(s);
    return Status::Ok();
  }
  Status graphNodeCount(Graph graph, std::size_t* count) override {
    if (!count) return nullArg("graphNodeCount", "count");
    if (Status st = checkGraph(graph, "graphNodeCount"); !st.ok()) return st;
    *count = graph->nodes.size();
    return Status::Ok();
  }
  Status graphLaunch(Graph graph, Stream stream) override {
    if (Status st = checkGraph(graph, "graphLaunch"); !st.ok()) return st;
    StreamObject* s = nullptr;
    if (Status st = resolve(stream, "graphLaunch", &s); !st.ok()) return st;
    if (s->device != graph->device)
      return Status(Code::InvalidValue, "graphLaunch: graph was captured on device " +
                                            std::to_string(graph->device) + ", stream is on device " +
                                            std::to_string(s->device));
    if (capturing(s)) return breakCapture(s, "graphLaunch (nested graphs are not supported)");
    double overhead = params_.host.launch_overhead_s;  // one launch for the whole graph
    for (GraphNode& n : graph->nodes) {
      if (n.work) {
        try {
          n.work();
        } catch (const std::exception& e) {
          return Status(Code::KernelFailed, "graph node '" + n.name + "' failed: " + e.what());
        }
      }
      model::Command cmd = n.cmd;
      cmd.in_graph = true;
      if (Status st = submit(s, std::move(cmd), n.name, overhead, nullptr); !st.ok()) return st;
      overhead = kGraphNodeHostSeconds;
    }
    return Status::Ok();
  }
  Status graphDestroy(Graph graph) override {
    if (Status st = checkGraph(graph, "graphDestroy"); !st.ok()) return st;
    graph->alive = false;
    graph->nodes.clear();
    return Status::Ok();
  }

  // ---- time and activities
  Status hostTimePs(uint64_t* ps) override {
    if (!ps) return nullArg("hostTimePs", "ps");
    *ps = sim_.hostNow();
    return Status::Ok();
  }
  Status setActivityRecording(bool on) override {
    sim_.setRecording(on);
    return Status::Ok();
  }
  Status drainActivities(std::vector<ActivityRecord>* out) override {
    if (!out) return nullArg("drainActivities", "out");
    for (const sim::Activity& a : sim_.drainActivities()) {
      ActivityRecord r;
      r.kind = kindOf(a);
      r.device = static_cast<int>(model::index(a.device));
      r.stream_id = a.stream_tag;
      r.hardware_queue = model::index(a.queue);
      r.name = sim_.nameOf(a.name_id);
      r.submit_ps = a.ready_ps;
      r.start_ps = a.start_ps;
      r.end_ps = a.end_ps;
      r.flops = a.flops;
      r.bytes = a.bytes;
      out->push_back(std::move(r));
    }
    return Status::Ok();
  }

 private:
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
  Status breakCapture(StreamObject* s, const std::string& what) {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->capture.reset();
    s->capturing = false;
    s->capture_broken = what;
    return Status(Code::NotSupported, what + " is not allowed while stream " + std::to_string(s->id) +
                                          " is capturing; the capture is invalidated");
  }
  Status record(StreamObject* s, std::string_view name, std::function<void()> work,
                model::Command cmd) {
    std::lock_guard<std::mutex> lock(s->mutex);
    if (!s->capture) return Status(Code::Internal, "stream stopped capturing");
    s->capture->nodes.push_back(GraphNode{std::string(name), std::move(work), std::move(cmd)});
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
  const model::DeviceParams& params_;
  int devices_;
  DeviceMemory memory_;
  std::vector<std::unique_ptr<StreamObject>> default_streams_;
  std::mutex streams_mutex_;
  std::deque<std::unique_ptr<StreamObject>> streams_;
  std::deque<std::unique_ptr<EventObject>> events_;
  std::deque<std::unique_ptr<GraphObject>> graphs_;
  std::vector<uint32_t> next_queue_;
  uint32_t next_stream_id_ = 1;
};

}  // namespace

std::unique_ptr<IBackend> createSimBackend(const InitOptions& options, Status* why) {
  try {
    sim::SimOptions defaults;
    sim::SimOptions o = sim::SimOptions::fromEnvironment(defaults);
    if (!options.preset.empty()) o.preset = options.preset;
    if (options.devices > 0) o.devices = options.devices;
    if (!options.overrides_file.empty()) o.overrides_file = options.overrides_file;
    o.overrides = options.overrides;
    Simulator& sim = Simulator::start(o);
    return std::make_unique<SimBackend>(sim);
  } catch (const std::exception& e) {
    *why = Status(Code::InitFailed, e.what());
    return nullptr;
  }
}

}  // namespace cardsim::shim
