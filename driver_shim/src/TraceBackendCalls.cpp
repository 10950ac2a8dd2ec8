// TraceBackend's per-call recording (TraceBackend.h): each shim call forwarded to the wrapped
// backend and, while a trace is being recorded, written with its arguments and host span.
// Opening, stopping and draining device commands are in TraceBackend.cpp.
#include <cstdio>
#include <exception>

#include "TraceBackend.h"
#include "TraceRecorder.h"

namespace cardsim::shim {

namespace {

// Completed commands are collected from the backend after this many recorded calls (and
// when recording stops), so the backend's activity buffer stays small.
constexpr uint32_t kCallsPerDrain = 512;

thread_local uint32_t t_thread = UINT32_MAX;

uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

trace::CopyKind copyKind(MemcpyKind k) {
  switch (k) {
    case MemcpyKind::HostToDevice: return trace::COPY_HOST_TO_DEVICE;
    case MemcpyKind::DeviceToHost: return trace::COPY_DEVICE_TO_HOST;
    case MemcpyKind::DeviceToDevice: return trace::COPY_DEVICE_TO_DEVICE;
    case MemcpyKind::HostToHost: return trace::COPY_HOST_TO_HOST;
    case MemcpyKind::Default: return trace::COPY_DEFAULT;
  }
  return trace::COPY_DEFAULT;
}

trace::KernelClass kernelClass(KernelClass k) {
  switch (k) {
    case KernelClass::Gemm: return trace::KERNEL_GEMM;
    case KernelClass::Elementwise: return trace::KERNEL_ELEMENTWISE;
    case KernelClass::Reduction: return trace::KERNEL_REDUCTION;
    case KernelClass::Other: return trace::KERNEL_OTHER;
  }
  return trace::KERNEL_OTHER;
}

trace::DataType dataType(DataType t) {
  switch (t) {
    case DataType::Float64: return trace::DTYPE_FP64;
    case DataType::Float32: return trace::DTYPE_FP32;
    case DataType::TFloat32: return trace::DTYPE_TF32;
    case DataType::Float16: return trace::DTYPE_FP16;
    case DataType::BFloat16: return trace::DTYPE_BF16;
    case DataType::Int8: return trace::DTYPE_INT8;
  }
  return trace::DTYPE_FP32;
}

}  // namespace

// ---- recording one call ---------------------------------------------------------------

TraceBackend::Begin TraceBackend::begin() {
  if (t_thread == UINT32_MAX) t_thread = next_thread_.fetch_add(1);
  Begin b{t_thread, 0, false};
  (void)inner_->hostThreadClock(&b.ps, &b.started);
  // A thread's first call starts its clock (at the latest host time of the process): start
  // it here instead, at the same time, so that the call's span holds what it submits.
  if (!b.started) b.started = inner_->hostTimePs(&b.ps).ok();
  return b;
}

TraceBackend::Target TraceBackend::target(Stream stream) {
  Target t;
  if (!stream) {
    (void)inner_->getDevice(&t.device);
    return t;
  }
  if (!inner_->streamGetId(stream, &t.stream).ok()) t.stream = UINT32_MAX;
  (void)inner_->streamGetDevice(stream, &t.device);
  return t;
}

template <typename Fill>
void TraceBackend::record(const Begin& b, const Status& st, const Target* where, bool opens, Fill&& fill) {
  TraceRecorder::Host host;
  host.thread = b.thread;
  (void)inner_->hostTimePs(&host.end_ps);
  host.begin_ps = b.started ? b.ps : host.end_ps;
  host.status = static_cast<int>(st.code());
  (void)inner_->getDevice(&host.device);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recorder_) {
    if (armed_directory_.empty() || !opens) return;
    const std::string dir = armed_directory_;
    armed_directory_.clear();
    if (Status s = openLocked(dir, "env"); !s.ok()) {
      std::fprintf(stderr, "cardsim: CARDSIM_TRACE: not recording: %s\n", s.message().c_str());
      hooked_ = false;
      return;
    }
  }
  try {
    trace::Envelope* e = recorder_->newRecord();
    fill(*e);
    const uint64_t call = recorder_->writeCall(e, host);
    if (where && st.ok()) recorder_->noteSubmission(where->device, where->stream, call, host);
    if (++calls_since_drain_ >= kCallsPerDrain) drainLocked();
  } catch (const std::exception& ex) {
    failLocked(ex.what());
  }
}

// The shape of every recorded call: run it, then record it (if still recording).
#define CARDSIM_TRACE_CALL(call, target_ptr, opens, fill) \
  do {                                                    \
    if (!hooked()) return inner_->call;                   \
    const Begin b_ = begin();                             \
    Status st_ = inner_->call;                            \
    record(b_, st_, target_ptr, opens, fill);             \
    return st_;                                           \
  } while (0)

Status TraceBackend::setDevice(int device) {
  CARDSIM_TRACE_CALL(setDevice(device), nullptr, false, [&](trace::Envelope& e) {
    e.mutable_api()->set_api(trace::ApiCall::SET_DEVICE);
    e.mutable_api()->set_arg(device);
  });
}

Status TraceBackend::deviceSynchronize() {
  CARDSIM_TRACE_CALL(deviceSynchronize(), nullptr, false,
                     [&](trace::Envelope& e) { e.mutable_api()->set_api(trace::ApiCall::DEVICE_SYNCHRONIZE); });
}

Status TraceBackend::memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  CARDSIM_TRACE_CALL(memGetInfo(free_bytes, total_bytes), nullptr, false,
                     [&](trace::Envelope& e) { e.mutable_api()->set_api(trace::ApiCall::MEM_GET_INFO); });
}

Status TraceBackend::malloc(void** ptr, std::size_t bytes) {
  CARDSIM_TRACE_CALL(malloc(ptr, bytes), nullptr, true, [&](trace::Envelope& e) {
    trace::Alloc* a = e.mutable_alloc();
    a->set_kind(trace::MEMORY_DEVICE);
    a->set_address(ptr && st_.ok() ? addr(*ptr) : 0);
    a->set_bytes(bytes);
  });
}

Status TraceBackend::free(void* ptr) {
  CARDSIM_TRACE_CALL(free(ptr), nullptr, true, [&](trace::Envelope& e) {
    e.mutable_free()->set_kind(trace::MEMORY_DEVICE);
    e.mutable_free()->set_address(addr(ptr));
  });
}

Status TraceBackend::hostMalloc(void** ptr, std::size_t bytes) {
  CARDSIM_TRACE_CALL(hostMalloc(ptr, bytes), nullptr, true, [&](trace::Envelope& e) {
    trace::Alloc* a = e.mutable_alloc();
    a->set_kind(trace::MEMORY_HOST_PINNED);
    a->set_address(ptr && st_.ok() ? addr(*ptr) : 0);
    a->set_bytes(bytes);
  });
}

Status TraceBackend::hostFree(void* ptr) {
  CARDSIM_TRACE_CALL(hostFree(ptr), nullptr, true, [&](trace::Envelope& e) {
    e.mutable_free()->set_kind(trace::MEMORY_HOST_PINNED);
    e.mutable_free()->set_address(addr(ptr));
  });
}

Status TraceBackend::hostRegister(void* ptr, std::size_t bytes) {
  CARDSIM_TRACE_CALL(hostRegister(ptr, bytes), nullptr, true, [&](trace::Envelope& e) {
    trace::Alloc* a = e.mutable_alloc();
    a->set_kind(trace::MEMORY_HOST_REGISTERED);
    a->set_address(addr(ptr));
    a->set_bytes(bytes);
  });
}

Status TraceBackend::hostUnregister(void* ptr) {
  CARDSIM_TRACE_CALL(hostUnregister(ptr), nullptr, true, [&](trace::Envelope& e) {
    e.mutable_free()->set_kind(trace::MEMORY_HOST_REGISTERED);
    e.mutable_free()->set_address(addr(ptr));
  });
}

Status TraceBackend::memset(void* ptr, int value, std::size_t bytes, Stream stream, bool async) {
  if (!hooked()) return inner_->memset(ptr, value, bytes, stream, async);
  const Target t = target(stream);
  CARDSIM_TRACE_CALL(memset(ptr, value, bytes, stream, async), &t, true, [&](trace::Envelope& e) {
    trace::Memset* m = e.mutable_memset();
    m->set_address(addr(ptr));
    m->set_bytes(bytes);
    m->set_value(value);
    m->set_stream(t.stream);
    m->set_async(async);
  });
}

Status TraceBackend::memcpy(void* dst, const void* src, std::size_t bytes, MemcpyKind kind, Stream stream,
                            bool async) {
  if (!hooked()) return inner_->memcpy(dst, src, bytes, kind, stream, async);
  const Target t = target(stream);
  auto attributes = [&](const void* p) {
    PointerAttributes a;
    if (!inner_->pointerGetAttributes(&a, p).ok()) a.type = PointerAttributes::Type::Unregistered;
    return a;
  };
  CARDSIM_TRACE_CALL(memcpy(dst, src, bytes, kind, stream, async), &t, true, [&](trace::Envelope& e) {
    const PointerAttributes from = attributes(src);
    const PointerAttributes to = attributes(dst);
    using Type = PointerAttributes::Type;
    trace::Memcpy* m = e.mutable_memcpy();
    m->set_kind(copyKind(kind));
    m->set_bytes(bytes);
    m->set_src_device(from.type == Type::Device ? from.device : -1);
    m->set_dst_device(to.type == Type::Device ? to.device : -1);
    m->set_host_pinned(from.type == Type::Host || to.type == Type::Host);
    m->set_stream(t.stream);
    m->set_async(async);
    m->set_src(addr(src));
    m->set_dst(addr(dst));
  });
}

Status TraceBackend::memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                     std::size_t bytes, Stream stream) {
  if (!hooked()) return inner_->memcpyPeerAsync(dst, dst_device, src, src_device, bytes, stream);
  const Target t = target(stream);
  CARDSIM_TRACE_CALL(memcpyPeerAsync(dst, dst_device, src, src_device, bytes, stream), &t, true,
                     [&](trace::Envelope& e) {
                       trace::Memcpy* m = e.mutable_memcpy();
                       m->set_kind(trace::COPY_PEER);
                       m->set_bytes(bytes);
                       m->set_src_device(src_device);
                       m->set_dst_device(dst_device);
                       m->set_stream(t.stream);
                       m->set_async(true);
                       m->set_src(addr(src));
                       m->set_dst(addr(dst));
                     });
}

Status TraceBackend::streamCreate(Stream* stream, int priority) {
  CARDSIM_TRACE_CALL(streamCreate(stream, priority), nullptr, true, [&](trace::Envelope& e) {
    trace::StreamOp* s = e.mutable_stream();
    s->set_op(trace::StreamOp::CREATE);
    s->set_stream(st_.ok() && stream ? target(*stream).stream : 0);
    s->set_priority(priority);
  });
}

Status TraceBackend::streamDestroy(Stream stream) {
  if (!hooked()) return inner_->streamDestroy(stream);
  const Target t = target(stream);
  CARDSIM_TRACE_CALL(streamDestroy(stream), nullptr, true, [&](trace::Envelope& e) {
    e.mutable_stream()->set_op(trace::StreamOp::DESTROY);
    e.mutable_stream()->set_stream(t.stream);
  });
}

Status TraceBackend::streamSynchronize(Stream stream) {
  if (!hooked()) return inner_->streamSynchronize(stream);
  const Target t = target(stream);
  CARDSIM_TRACE_CALL(streamSynchronize(stream), nullptr, false, [&](trace::Envelope& e) {
    e.mutable_stream()->set_op(trace::StreamOp::SYNCHRONIZE);
    e.mutable_stream()->set_stream(t.stream);
  });
}

Status TraceBackend::streamQuery(Stream stream) {
  if (!hooked()) return inner_->streamQuery(stream);
  const Target t = target(stream);
  CARDSIM_TRACE_CALL(streamQuery(stream), nullptr, false, [&](trace::Envelope& e) {
    e.mutable_stream()->set_op(trace::StreamOp::QUERY);
    e.mutable_stream()->set_stream(t.stream);
  });
}

Status TraceBackend::streamWaitEvent(Stream stream, Event event) {
  if (!hooked()) return inner_->streamWaitEvent(stream, event);
  const Target t = target(stream);
  CARDSIM_TRACE_CALL(streamWaitEvent(stream, event), &t, true, [&](trace::Envelope& e) {
    trace::EventOp* o = e.mutable_event();
    o->set_op(trace::EventOp::WAIT);
    o->set_event(recorder_->eventId(event));
    o->set_stream(t.stream);
  });
}

Status TraceBackend::eventCreate(Event* event, unsigned flags) {
  CARDSIM_TRACE_CALL(eventCreate(event, flags), nullptr, true, [&](trace::Envelope& e) {
    trace::EventOp* o = e.mutable_event();
    o->set_op(trace::EventOp::CREATE);
    if (st_.ok() && event) {
      recorder_->forgetEvent(*event);   // a reused handle is a new event
      o->set_event(recorder_->eventId(*event));
    }
    o->set_flags(flags);
  });
}

Status TraceBackend::eventDestroy(Event event) {
  CARDSIM_TRACE_CALL(eventDestroy(event), nullptr, true, [&](trace::Envelope& e) {
    e.mutable_event()->set_op(trace::EventOp::DESTROY);
    e.mutable_event()->set_event(recorder_->eventId(event));
    recorder_->forgetEvent(event);
  });
}

Status TraceBackend::eventRecord(Event event, Stream stream) {
  if (!hooked()) return inner_->eventRecord(event, stream);
  const Target t = target(stream);
  CARDSIM_TRACE_CALL(eventRecord(event, stream), &t, true, [&](trace::Envelope& e) {
    trace::EventOp* o = e.mutable_event();
    o->set_op(trace::EventOp::RECORD);
    o->set_event(recorder_->eventId(event));
    o->set_stream(t.stream);
  });
}

Status TraceBackend::eventQuery(Event event) {
  CARDSIM_TRACE_CALL(eventQuery(event), nullptr, false, [&](trace::Envelope& e) {
    e.mutable_event()->set_op(trace::EventOp::QUERY);
    e.mutable_event()->set_event(recorder_->eventId(event));
  });
}

Status TraceBackend::eventSynchronize(Event event) {
  CARDSIM_TRACE_CALL(eventSynchronize(event), nullptr, false, [&](trace::Envelope& e) {
    e.mutable_event()->set_op(trace::EventOp::SYNCHRONIZE);
    e.mutable_event()->set_event(recorder_->eventId(event));
  });
}

Status TraceBackend::eventElapsedTime(float* ms, Event start, Event end) {
  CARDSIM_TRACE_CALL(eventElapsedTime(ms, start, end), nullptr, false, [&](trace::Envelope& e) {
    trace::EventOp* o = e.mutable_event();
    o->set_op(trace::EventOp::ELAPSED);
    o->set_event(recorder_->eventId(start));
    o->set_other_event(recorder_->eventId(end));
  });
}

Status TraceBackend::launchKernel(Stream stream, std::string_view kname, const KernelCost& cost,
                                  const std::function<void()>& work) {
  uint32_t outputs = 0;
  std::vector<std::vector<int64_t>> shapes = takeNextKernelShapes(&outputs);   // this launch's, or none
  if (!hooked()) return inner_->launchKernel(stream, kname, cost, work);
  const Target t = target(stream);
  CARDSIM_TRACE_CALL(launchKernel(stream, kname, cost, work), &t, true, [&](trace::Envelope& e) {
    const uint32_t name = recorder_->nameId(kname);
    trace::KernelLaunch* k = e.mutable_kernel();
    for (const std::vector<int64_t>& dims : shapes) k->add_shapes()->mutable_dims()->Add(dims.begin(), dims.end());
    k->set_output_shapes(outputs);
    k->set_name(name);
    k->set_stream(t.stream);
    k->set_kernel_class(kernelClass(cost.kernel_class));
    k->set_dtype(dataType(cost.dtype));
    k->set_flops(cost.flops);
    k->set_bytes_read(cost.bytes_read);
    k->set_bytes_written(cost.bytes_written);
    k->set_tiles(cost.tiles);
    k->set_graph_node(cost.graph_node);
  });
}

Status TraceBackend::launchCollective(Stream stream, std::string_view cname, double seconds) {
  if (!hooked()) return inner_->launchCollective(stream, cname, seconds);
  const Target t = target(stream);
  CARDSIM_TRACE_CALL(launchCollective(stream, cname, seconds), &t, true, [&](trace::Envelope& e) {
    trace::Collective* c = e.mutable_collective();
    c->set_op(std::string(cname));
    c->set_seconds(seconds);
    c->set_stream(t.stream);
    c->set_pretimed(true);
  });
}

Status TraceBackend::launchFabricCollective(Stream stream, const CollectiveDesc& desc, double* seconds,
                                            std::string* algorithm) {
  if (!hooked()) return inner_->launchFabricCollective(stream, desc, seconds, algorithm);
  const Target t = target(stream);
  CARDSIM_TRACE_CALL(launchFabricCollective(stream, desc, seconds, algorithm), &t, true, [&](trace::Envelope& e) {
    trace::Collective* c = e.mutable_collective();
    c->set_op(desc.op);
    c->set_bytes(desc.bytes);
    for (int r : desc.ranks) c->add_ranks(r);
    c->set_root(desc.root);
    c->set_peer(desc.peer);
    c->set_algorithm(desc.algorithm);
    c->set_group(desc.group);
    c->set_dtype(desc.dtype);
    c->set_p2p(static_cast<trace::Collective::PointToPoint>(desc.p2p));
    c->set_tag(desc.tag);
    for (double b : desc.send_bytes) c->add_send_bytes(b);
    for (double b : desc.recv_bytes) c->add_recv_bytes(b);
    if (desc.posted) c->set_posted_event(recorder_->eventId(desc.posted));
    if (st_.ok() && algorithm) c->set_algorithm_used(*algorithm);
    if (st_.ok() && seconds) c->set_seconds(*seconds);
    c->set_stream(t.stream);
  });
}

Status TraceBackend::launchHostFunc(Stream stream, std::function<void()> fn) {
  if (!hooked()) return inner_->launchHostFunc(stream, std::move(fn));
  const Target t = target(stream);
  CARDSIM_TRACE_CALL(launchHostFunc(stream, std::move(fn)), nullptr, true, [&](trace::Envelope& e) {
    e.mutable_api()->set_api(trace::ApiCall::HOST_FUNC);
    e.mutable_api()->set_arg(t.stream);
  });
}

Status TraceBackend::streamBeginCapture(Stream stream, CaptureMode mode) {
  if (!hooked()) return inner_->streamBeginCapture(stream, mode);
  const Target t = target(stream);
  CARDSIM_TRACE_CALL(streamBeginCapture(stream, mode), nullptr, true, [&](trace::Envelope& e) {
    e.mutable_graph()->set_op(trace::GraphOp::CAPTURE_BEGIN);
    e.mutable_graph()->set_stream(t.stream);
    if (st_.ok()) capturing_[stream] = t.device;
  });
}

Status TraceBackend::streamEndCapture(Stream stream, Graph* graph) {
  if (!hooked()) return inner_->streamEndCapture(stream, graph);
  const Target t = target(stream);
  CARDSIM_TRACE_CALL(streamEndCapture(stream, graph), nullptr, true, [&](trace::Envelope& e) {
    trace::GraphOp* g = e.mutable_graph();
    g->set_op(trace::GraphOp::CAPTURE_END);
    g->set_stream(t.stream);
    capturing_.erase(stream);
    if (st_.ok() && graph && *graph) {
      recorder_->forgetGraph(*graph);   // a reused handle is a new graph
      g->set_graph(recorder_->graphId(*graph));
      std::size_t n = 0;
      if (inner_->graphNodeCount(*graph, &n).ok()) g->set_nodes(n);
    }
  });
}

Status TraceBackend::graphLaunch(Graph graph, Stream stream) {
  if (!hooked()) return inner_->graphLaunch(graph, stream);
  const Target t = target(stream);
  std::size_t nodes = 0;
  (void)inner_->graphNodeCount(graph, &nodes);
  CARDSIM_TRACE_CALL(graphLaunch(graph, stream), &t, true, [&](trace::Envelope& e) {
    trace::GraphOp* g = e.mutable_graph();
    g->set_op(trace::GraphOp::LAUNCH);
    g->set_graph(recorder_->graphId(graph));
    g->set_stream(t.stream);
    g->set_nodes(nodes);
  });
}

Status TraceBackend::graphDestroy(Graph graph) {
  CARDSIM_TRACE_CALL(graphDestroy(graph), nullptr, true, [&](trace::Envelope& e) {
    e.mutable_graph()->set_op(trace::GraphOp::DESTROY);
    e.mutable_graph()->set_graph(recorder_->graphId(graph));
    recorder_->forgetGraph(graph);
  });
}

Status TraceBackend::hostClockShareBegin() {
  CARDSIM_TRACE_CALL(hostClockShareBegin(), nullptr, false,
                     [&](trace::Envelope& e) { e.mutable_api()->set_api(trace::ApiCall::CLOCK_SHARE_BEGIN); });
}

Status TraceBackend::hostClockShareEnd() {
  CARDSIM_TRACE_CALL(hostClockShareEnd(), nullptr, false,
                     [&](trace::Envelope& e) { e.mutable_api()->set_api(trace::ApiCall::CLOCK_SHARE_END); });
}

Status TraceBackend::hostClockJoin(uint64_t ps) {
  CARDSIM_TRACE_CALL(hostClockJoin(ps), nullptr, false, [&](trace::Envelope& e) {
    e.mutable_api()->set_api(trace::ApiCall::CLOCK_JOIN);
    e.mutable_api()->set_arg(static_cast<int64_t>(ps));
  });
}

#undef CARDSIM_TRACE_CALL

// ---- the program's own activity records, while the trace takes the completions -------

}  // namespace cardsim::shim
