// cardsim_torch._C: the Python face of the device runtime, shared by torch_mlu and
// torch_supa (each activates it with its own personality).
#include <torch/extension.h>

#include <ATen/Context.h>
#include <ATen/core/GraphImplInterface.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include "DeviceAllocator.h"
#include "cardsim/process.h"
#include "DeviceRuntime.h"
#include "HostExecution.h"
#include "CostModel.h"
#include "KernelLaunch.h"
#include "MemoryHistory.h"
#include "OptimizerOps.h"

namespace torch {
// torch/csrc/profiler/python/combined_traceback.h, which needs nlohmann/json (not in the
// wheel's headers) for a function not used here.
TORCH_API std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
}  // namespace torch

namespace py = pybind11;
using namespace cardsim;
using cardsim::kernels::throwIfFailed;

namespace {

constexpr auto kDev = c10::DeviceType::PrivateUse1;

// -1 means the current device, as in torch.cuda; other negative indices are errors.
c10::DeviceIndex resolve(int64_t device) {
  const c10::DeviceIndex d = device == -1 ? accel::currentDevice() : static_cast<c10::DeviceIndex>(device);
  accel::checkIndex(d);
  return d;
}

py::tuple streamTuple(const c10::Stream& s) {
  return py::make_tuple(s.id(), static_cast<int>(s.device_index()), static_cast<int>(s.device_type()));
}

c10::Stream streamFrom(int64_t id, int64_t device) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDev, resolve(device)), id);
}

std::shared_ptr<c10::GatheredContext> gatherPythonStack() {
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, /*cpp=*/false);
}

// The allocator's segments and recorded actions in PyTorch's snapshot format (see
// torch.cuda.memory._snapshot); stacks symbolized in one batch.
py::dict memorySnapshot() {
  const auto segments = accel::deviceAllocator().segments();
  std::vector<std::vector<accel::AllocatorTraceEntry>> traces;
  const size_t devices = std::max<size_t>(static_cast<size_t>(accel::deviceCount()),
                                          accel::memoryHistory().devicesTraced());
  for (size_t d = 0; d < devices; ++d) traces.push_back(accel::memoryHistory().trace(static_cast<c10::DeviceIndex>(d)));
  std::vector<torch::CapturedTraceback*> to_symbolize;
  auto slot = [&](const std::shared_ptr<c10::GatheredContext>& c) -> int64_t {
    auto* tb = dynamic_cast<torch::CapturedTraceback*>(c.get());
    if (!tb) return -1;
    to_symbolize.push_back(tb);
    return static_cast<int64_t>(to_symbolize.size() - 1);
  };
  std::vector<int64_t> seg_slot, entry_slot;
  for (const auto& s : segments) seg_slot.push_back(slot(s.context));
  for (const auto& t : traces)
    for (const auto& e : t) entry_slot.push_back(slot(e.context));
  const std::vector<py::object> frames = torch::py_symbolize(to_symbolize);
  auto framesAt = [&](int64_t i) -> py::object { return i < 0 ? py::list() : frames[static_cast<size_t>(i)]; };

  py::list segs;
  for (size_t i = 0; i < segments.size(); ++i) {
    const auto& s = segments[i];
    const bool allocated = std::string_view(s.state) == "active_allocated";
    const bool active = std::string_view(s.state) != "inactive";
    // A reused block larger than its request shows as the allocation and an inactive
    // remainder, as a split block does in torch.cuda's snapshots (the statistics count the
    // allocation's rounded size).
    const uint64_t in_use = active ? s.used : 0;
    py::list blocks;
    py::dict block;
    block["address"] = s.address;
    block["size"] = active ? s.used : s.size;
    block["requested_size"] = allocated ? s.requested : 0;
    block["state"] = s.state;
    block["frames"] = framesAt(seg_slot[i]);
    blocks.append(block);
    if (active && s.size > s.used) {
      py::dict rest;
      rest["address"] = s.address + s.used;
      rest["size"] = s.size - s.used;
      rest["requested_size"] = 0;
      rest["state"] = "inactive";
      rest["frames"] = py::list();
      blocks.append(rest);
    }
    py::dict seg;
    seg["device"] = static_cast<int>(s.device);
    seg["address"] = s.address;
    seg["total_size"] = s.size;
    seg["allocated_size"] = allocated ? s.used : 0;
    seg["active_size"] = in_use;
    seg["requested_size"] = allocated ? s.requested : 0;
    seg["stream"] = s.stream;
    seg["segment_pool_id"] = py::make_tuple(0, 0);
    seg["is_expandable"] = false;
    seg["frames"] = framesAt(seg_slot[i]);
    seg["blocks"] = blocks;
    segs.append(seg);
  }
  py::list device_traces;
  size_t k = 0;
  for (const auto& t : traces) {
    py::list entries;
    for (const auto& e : t) {
      py::dict d;
      d["action"] = e.action;
      d["addr"] = e.addr;
      d["size"] = e.size;
      d["stream"] = e.stream;
      d["time_us"] = e.time_us;
      if (std::string_view(e.action) == "oom") d["device_free"] = e.device_free;
      d["frames"] = framesAt(entry_slot[k++]);
      entries.append(d);
    }
    device_traces.append(entries);
  }
  py::dict out;
  out["segments"] = segs;
  out["device_traces"] = device_traces;
  out["allocator_settings"] = py::dict();
  return out;
}

// The pinned allocator's statistics, nested as torch.cuda's host_memory_stats_as_nested_dict.
py::dict hostStats(const at::HostStats& s) {
  py::dict out;
  auto stat = [](const c10::CachingAllocator::Stat& st) {
    py::dict d;
    d["current"] = st.current;
    d["peak"] = st.peak;
    d["allocated"] = st.allocated;
    d["freed"] = st.freed;
    return d;
  };
  auto duration = [](const c10::CachingAllocator::DurationStat& st) {
    py::dict d;
    d["total"] = st.total;
    d["max"] = st.max;
    d["min"] = st.min;
    d["count"] = st.count;
    d["avg"] = st.count ? st.total / st.count : 0;
    return d;
  };
  out["allocations"] = stat(s.allocations);
  out["allocated_bytes"] = stat(s.allocated_bytes);
  out["active_requests"] = stat(s.active_requests);
  out["active_bytes"] = stat(s.active_bytes);
  out["num_host_alloc"] = s.num_host_alloc;
  out["num_host_free"] = s.num_host_free;
  out["host_alloc_time"] = duration(s.host_alloc_time);
  out["host_free_time"] = duration(s.host_free_time);
  return out;
}

py::dict flattenStats(const c10::CachingDeviceAllocator::DeviceStats& s) {
  py::dict out;
  const char* pools[] = {"all", "small_pool", "large_pool"};
  auto arr = [&](const std::string& name, const c10::CachingAllocator::StatArray& a) {
    for (size_t k = 0; k < 3; ++k) {
      const std::string p = name + "." + pools[k] + ".";
      out[py::str(p + "current")] = a[k].current;
      out[py::str(p + "peak")] = a[k].peak;
      out[py::str(p + "allocated")] = a[k].allocated;
      out[py::str(p + "freed")] = a[k].freed;
    }
  };
  arr("allocation", s.allocation);
  arr("segment", s.segment);
  arr("active", s.active);
  arr("inactive_split", s.inactive_split);
  arr("allocated_bytes", s.allocated_bytes);
  arr("reserved_bytes", s.reserved_bytes);
  arr("active_bytes", s.active_bytes);
  arr("inactive_split_bytes", s.inactive_split_bytes);
  arr("requested_bytes", s.requested_bytes);
  out["num_alloc_retries"] = s.num_alloc_retries;
  out["num_ooms"] = s.num_ooms;
  out["num_sync_all_streams"] = s.num_sync_all_streams;
  out["num_device_alloc"] = s.num_device_alloc;
  out["num_device_free"] = s.num_device_free;
  out["max_split_size"] = s.max_split_size;
  out["oversize_allocations.current"] = s.oversize_allocations.current;
  out["oversize_allocations.peak"] = s.oversize_allocations.peak;
  out["oversize_segments.current"] = s.oversize_segments.current;
  out["oversize_segments.peak"] = s.oversize_segments.peak;
  return out;
}

// A captured graph: the shim graph recorded from one stream.
class Graph {
 public:
  ~Graph() { reset(); }
  void captureBegin(int64_t stream_id, int64_t device, const std::string& mode = "global") {
    TORCH_CHECK(!graph_ && !stream_, "this graph already holds a capture; call reset() first");
    TORCH_CHECK(stream_id != 0, "graphs cannot be captured on the default stream; use a side stream");
    c10::Stream s = streamFrom(stream_id, device);
    c10::DeviceGuard guard(s.device());
    stream_ = accel::shimStream(s);
    device_ = s.device_index();
    shim::CaptureMode m = shim::CaptureMode::Global;
    if (mode == "thread_local") m = shim::CaptureMode::ThreadLocal;
    else if (mode == "relaxed") m = shim::CaptureMode::Relaxed;
    else TORCH_CHECK(mode == "global" || mode == "default", "capture_error_mode must be 'global', "
                     "'thread_local' or 'relaxed', got '", mode, "'");
    throwIfFailed(shim::streamBeginCapture(stream_, m), "capture_begin");
  }
  void captureEnd() {
    TORCH_CHECK(stream_ && !graph_, "capture_end without capture_begin");
    c10::DeviceGuard guard(c10::Device(kDev, device_));
    shim::Graph g = nullptr;
    shim::Status st = shim::streamEndCapture(stream_, &g);
    stream_ = nullptr;
    TORCH_CHECK(st.ok(), "capture_end: ", st.toString());
    graph_ = g;
  }
  void replay(int64_t stream_id, int64_t device) {
    TORCH_CHECK(graph_, "replay: nothing captured");
    c10::Stream s = streamFrom(stream_id, device);
    c10::DeviceGuard guard(s.device());
    // The replayed work is the runtime's own: Python dispatch modes (the async checker's, a
    // user's) saw the operators when they were captured and must not see their CPU kernels.
    c10::impl::ExcludeDispatchKeyGuard no_python(
        c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
    throwIfFailed(shim::graphLaunch(graph_, accel::shimStream(s)), "replay");
  }
  size_t nodes() const {
    size_t n = 0;
    if (graph_) throwIfFailed(shim::graphNodeCount(graph_, &n), "graphNodeCount");
    return n;
  }
  py::list describe() const {
    using namespace pybind11::literals;
    std::vector<shim::GraphNodeInfo> nodes;
    if (graph_) throwIfFailed(shim::graphDescribe(graph_, &nodes), "graphDescribe");
    py::list out;
    for (const auto& n : nodes)
      out.append(py::dict("name"_a = n.name, "kind"_a = n.kind, "stream"_a = n.stream_id, "flops"_a = n.flops,
                          "bytes"_a = n.bytes, "event"_a = n.event));
    return out;
  }
  void reset() {
    if (graph_) (void)shim::graphDestroy(graph_);
    graph_ = nullptr;
    stream_ = nullptr;
  }

 private:
  shim::Graph graph_ = nullptr;
  shim::Stream stream_ = nullptr;
  c10::DeviceIndex device_ = 0;
};

// torch.accelerator.Graph for the device: a Graph on the current stream.
struct AcceleratorGraph final : at::GraphImplInterface {
  explicit AcceleratorGraph(const at::GraphImplArgs&) {}
  void capture_begin(at::MempoolId_t pool, at::GraphCaptureMode mode) override {
    const c10::Stream s = accel::currentStream(-1);
    graph.captureBegin(s.id(), s.device_index(),
                       mode == at::GraphCaptureMode::ThreadLocal ? "thread_local"
                       : mode == at::GraphCaptureMode::Relaxed   ? "relaxed"
                                                                 : "global");
    pool_ = pool;
  }
  void capture_end() override { graph.captureEnd(); }
  void instantiate() override {}
  void replay() override {
    const c10::Stream s = accel::currentStream(-1);
    graph.replay(s.id(), s.device_index());
  }
  void reset() override { graph.reset(); }
  at::MempoolId_t pool() const override { return pool_; }
  void enable_debug_mode() override {}
  void debug_dump(const std::string& path) override {
    FILE* f = std::fopen(path.c_str(), "w");
    TORCH_CHECK(f, "debug_dump: cannot write ", path);
    std::fprintf(f, "graph: %zu node(s)\n", graph.nodes());
    std::fclose(f);
  }
  Graph graph;
  at::MempoolId_t pool_{0, 0};
};

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "cardsim device runtime for PyTorch (shared by torch_mlu and torch_supa)";
  m.def("_activate", [](const std::string& device, const std::string& visible_env,
                        const std::string& default_preset) {
    accel::activate({device, visible_env, default_preset});
    accel::registerHooks();
  });
  // Python's atexit: an uncaught KeyboardInterrupt ends Python by SIGINT after finalizing,
  // skipping C's atexit, where the trace and the status file would otherwise be completed.
  m.def("_run_exit_cleanups", [](const std::string& reason) { cardsim::shim::runExitCleanups(reason); },
        py::call_guard<py::gil_scoped_release>());
  m.def("_register_fused_adam", &kernels::registerFusedAdam);
  // After the rename: the registry is keyed by the device type's (new) name.
  m.def("_register_graph_impl", [] {
    const std::string key = c10::DeviceTypeName(kDev, /*lower_case=*/false);
    if (!at::GraphImplRegistry()->Has(key))
      at::GraphImplRegistry()->Register(key, [](at::GraphImplArgs args) -> std::unique_ptr<at::GraphImplInterface> {
        return std::make_unique<AcceleratorGraph>(args);
      });
  });
  m.def("_register_deepspeed_ops", &kernels::registerDeepSpeedOps);
  m.def("_device_count", [] {
    const int n = accel::deviceCount();
    at::globalContext().lazyInitDevice(kDev);
    return n;
  });
  m.def("_current_device", [] { return static_cast<int>(accel::currentDevice()); });
  m.def("_set_device", [](int64_t d) { accel::setCurrentDevice(resolve(d)); });
  m.def("_synchronize", [](int64_t d) {
    py::gil_scoped_release nogil;
    c10::impl::getDeviceGuardImpl(kDev)->synchronizeDevice(resolve(d));
  });
  m.def("_device_properties", [](int64_t d) {
    const int s = accel::toShim(resolve(d));
    shim::DeviceProperties p;
    throwIfFailed(shim::getDeviceProperties(&p, s), "getDeviceProperties");
    py::dict out;
    out["name"] = p.name;
    out["vendor"] = p.vendor;
    out["preset"] = p.preset;
    out["backend"] = p.backend;
    out["total_memory"] = p.total_memory_bytes;
    out["cluster_count"] = p.cluster_count;
    out["cores_per_cluster"] = p.cores_per_cluster;
    out["clock_hz"] = p.clock_hz;
    out["memory_bandwidth"] = p.memory_bandwidth_bytes_per_s;
    out["memory_technology"] = p.memory_technology;
    out["peak_fp64_flops"] = p.peak_fp64_flops;
    out["peak_fp32_flops"] = p.peak_fp32_flops;
    out["peak_tf32_flops"] = p.peak_tf32_flops;
    out["peak_fp16_flops"] = p.peak_fp16_flops;
    out["peak_bf16_flops"] = p.peak_bf16_flops;
    out["peak_int8_ops"] = p.peak_int8_ops;
    out["major"] = p.compute_capability_major;
    out["minor"] = p.compute_capability_minor;
    out["pcie_generation"] = p.pcie_generation;
    out["pcie_lanes"] = p.pcie_lanes;
    out["host_link_bandwidth"] = p.host_link_bandwidth_bytes_per_s;
    out["dma_engines"] = p.dma_engines;
    out["hardware_queues"] = p.hardware_queues;
    return out;
  });
  m.def("_mem_get_info", [](int64_t d) { return accel::deviceAllocator().getMemoryInfo(resolve(d)); });
  m.def("_memory_stats", [](int64_t d) { return flattenStats(accel::deviceAllocator().getDeviceStats(resolve(d))); });
  m.def("_reset_peak_memory_stats", [](int64_t d) { accel::deviceAllocator().resetPeakStats(resolve(d)); });
  m.def("_reset_accumulated_memory_stats", [](int64_t d) {
    accel::deviceAllocator().resetAccumulatedStats(resolve(d));
  });
  m.def("_empty_cache", [] { accel::deviceAllocator().emptyCache(); });
  m.def("_set_memory_fraction", [](double f, int64_t d) { accel::deviceAllocator().setMemoryFraction(f, resolve(d)); });
  m.def("_memory_fraction", [](int64_t d) { return accel::deviceAllocator().memoryFraction(resolve(d)); });
  m.def("_set_sync_debug_mode", [](int mode) { kernels::setSyncDebugMode(mode); });
  m.def("_sync_debug_mode", [] { return kernels::syncDebugMode(); });
  m.def("_host_memory_stats", [] { return hostStats(accel::pinnedAllocator().get_stats()); });
  m.def("_reset_host_memory_stats", [](bool peak) {
    if (peak) accel::pinnedAllocator().reset_peak_stats();
    else accel::pinnedAllocator().reset_accumulated_stats();
  });
  m.def("_memory_summary", [](int64_t d) { return accel::deviceAllocator().summary(resolve(d)); });
  m.def("_record_memory_history", [](bool contexts, bool trace, size_t max_entries, bool clear) {
    accel::memoryHistory().configure(contexts, trace, max_entries, clear, &gatherPythonStack);
  });
  m.def("_memory_snapshot", &memorySnapshot);
  m.def("_current_stream", [](int64_t d) { return streamTuple(accel::currentStream(resolve(d))); });
  m.def("_default_stream", [](int64_t d) { return streamTuple(accel::defaultStream(resolve(d))); });
  m.def("_set_stream", [](int64_t id, int64_t d) { accel::setCurrentStream(streamFrom(id, d)); });
  m.def("_stream_priority", [](int64_t id, int64_t d) { return accel::streamPriority(streamFrom(id, d)); });
  m.def("_event_elapsed_time", [](uintptr_t start, uintptr_t end) {
    TORCH_CHECK(start && end, "elapsed_time: both events must have been recorded");
    return c10::impl::getDeviceGuardImpl(kDev)->elapsedTime(reinterpret_cast<void*>(start),
                                                           reinterpret_cast<void*>(end), -1);
  });
  m.def("_is_stream_capturing", [](int64_t id, int64_t d) {
    return c10::impl::getDeviceGuardImpl(kDev)->isStreamCapturing(streamFrom(id, d));
  });
  m.def("_stream_priority_range", [] { return py::make_tuple(0, accel::greatestPriority()); });
  // Host time across the autograd engine's hand-off (see cardsim_torch/host_time.py).
  m.def("_host_clock_share_begin", [] { throwIfFailed(shim::hostClockShareBegin(), "hostClockShareBegin"); });
  m.def("_host_clock_share_end", [] { throwIfFailed(shim::hostClockShareEnd(), "hostClockShareEnd"); });
  // Python-level joins (cardsim_torch/host_time.py): a finished thread's clock, if it has one.
  m.def("_host_thread_clock_ps", []() -> py::object {
    uint64_t ps = 0;
    bool started = false;
    throwIfFailed(shim::hostThreadClock(&ps, &started), "hostThreadClock");
    return started ? py::object(py::int_(ps)) : py::none();
  });
  // Where a host read of device data comes from: the innermost Python frame outside torch
  // and cardsim_torch (installed at import; called only for reads in timing mode).
  kernels::setHostReadSiteFn([]() -> std::string {
    py::gil_scoped_acquire gil;
    try {
      return py::module_::import("cardsim_torch.host_reads").attr("site")().cast<std::string>();
    } catch (const std::exception&) {
      return "(unknown site)";
    }
  });
  m.def("_host_reads", [] {
    py::list out;
    for (const auto& r : kernels::hostReads()) out.append(py::make_tuple(r.site, r.count, r.bytes));
    return out;
  });
  m.def("_execution_mode", [] {
    accel::start();
    shim::ExecutionMode mode = shim::ExecutionMode::Full;
    throwIfFailed(shim::getExecutionMode(&mode), "execution mode");
    return std::string(shim::executionModeName(mode));
  });
  m.def("_host_clock_join", [](uint64_t ps) { throwIfFailed(shim::hostClockJoin(ps), "hostClockJoin"); });
  m.def("_host_time_ns", [] {
    accel::start();
    uint64_t ps = 0;
    throwIfFailed(shim::hostTimePs(&ps), "hostTimePs");
    return static_cast<double>(ps) / 1000.0;
  });
  // A collective on the device's current stream for the time the fabric model gives it
  // (the group's global ranks are its devices on the fabric). Returns (seconds, algorithm).
  // With a fabric server (_fabric_connect), it completes when the server says, the same on
  // every member; `group` keys the process group's sequence of collectives. `p2p` (1 send,
  // 2 receive) joins the two sides of a send_recv by `tag`; `posted`, a receive's event
  // recorded when it was posted; `send_bytes` and `recv_bytes`, an uneven all_to_all's bytes
  // to and from each member; `reduce_op`, a reduction's ("sum"); `refused`, why this member
  // cannot run it (see shim CollectiveDesc).
  m.def("_launch_collective", [](int64_t d, const std::string& op, double bytes, const std::vector<int>& ranks,
                                 int root, int peer, const std::string& group, double timeout_s,
                                 const std::string& dtype, int p2p, int tag, uintptr_t posted,
                                 const std::vector<double>& send_bytes, const std::vector<double>& recv_bytes,
                                 const std::string& reduce_op, const std::string& refused, bool answer_later) {
    const c10::DeviceIndex dev = resolve(d);
    shim::CollectiveDesc desc;
    desc.op = op;
    desc.bytes = bytes;
    desc.ranks = ranks;
    desc.root = root;
    desc.peer = peer;
    desc.group = group;
    desc.timeout_s = timeout_s;
    desc.dtype = dtype;
    desc.reduce_op = reduce_op;
    desc.refused = refused;
    desc.answer_later = answer_later;
    TORCH_CHECK(p2p >= 0 && p2p <= 2, "_launch_collective: p2p must be 0 (none), 1 (send) or 2 (receive), got ", p2p);
    desc.p2p = static_cast<shim::CollectiveDesc::PointToPoint>(p2p);
    desc.tag = tag;
    desc.posted = reinterpret_cast<shim::Event>(posted);
    desc.send_bytes = send_bytes;
    desc.recv_bytes = recv_bytes;
    double seconds = 0;
    std::string algorithm;
    c10::DeviceGuard guard(c10::Device(kDev, dev));
    {
      // Waiting for the other ranks must not hold the interpreter.
      py::gil_scoped_release nogil;
      throwIfFailed(shim::launchFabricCollective(kernels::currentStream(dev), desc, &seconds, &algorithm), op.c_str());
    }
    return py::make_tuple(seconds, algorithm);
  }, py::arg("device"), py::arg("op"), py::arg("bytes"), py::arg("ranks"), py::arg("root") = 0,
     py::arg("peer") = 1, py::arg("group") = "", py::arg("timeout_s") = 0.0, py::arg("dtype") = "",
     py::arg("p2p") = 0, py::arg("tag") = 0, py::arg("posted") = 0,
     py::arg("send_bytes") = std::vector<double>{}, py::arg("recv_bytes") = std::vector<double>{},
     py::arg("reduce_op") = "", py::arg("refused") = "", py::arg("answer_later") = false);
  // Awaits the fabric server's answers to collectives launched with answer_later; raises
  // with the server's words for one of this thread's that failed.
  m.def("_fabric_settle", [](const std::string& op) {
    shim::Status st;
    {
      py::gil_scoped_release nogil;
      st = shim::fabricSettle();
    }
    throwIfFailed(st, op.c_str());
  }, py::arg("op") = "collective");
  // Where a receive is posted: a marker on the device's current stream that the runtime
  // records for itself (no host time), its handle for _launch_collective's `posted`.
  m.def("_posting_marker", [](int64_t d) {
    const c10::DeviceIndex dev = resolve(d);
    c10::DeviceGuard guard(c10::Device(kDev, dev));
    shim::Event ev = nullptr;
    throwIfFailed(shim::eventCreate(&ev, shim::kEventRuntimeMarker | shim::kEventDisableTiming), "eventCreate");
    if (shim::Status st = shim::eventRecord(ev, kernels::currentStream(dev)); !st.ok()) {
      (void)shim::eventDestroy(ev);
      throwIfFailed(st, "eventRecord");
    }
    return reinterpret_cast<uintptr_t>(ev);
  });
  m.def("_posting_marker_destroy", [](uintptr_t ev) {
    throwIfFailed(shim::eventDestroy(reinterpret_cast<shim::Event>(ev)), "eventDestroy");
  });
  // A collective's Work waited on from another stream: that stream waits for the marker
  // recorded after the collective (a stream wait of the program's, as the vendor library's
  // wait() makes one).
  m.def("_stream_wait_marker", [](int64_t d, uintptr_t ev) {
    const c10::DeviceIndex dev = resolve(d);
    c10::DeviceGuard guard(c10::Device(kDev, dev));
    throwIfFailed(shim::streamWaitEvent(kernels::currentStream(dev), reinterpret_cast<shim::Event>(ev)),
                  "streamWaitEvent");
  });
  // Holds the device's current stream for `seconds` of device time (no compute or memory
  // used): `cardsim collbench` queues its timed calls behind one, so that they run back to
  // back as the device gets to them, not as the host issues them.
  m.def("_stream_delay", [](int64_t d, double seconds) {
    const c10::DeviceIndex dev = resolve(d);
    c10::DeviceGuard guard(c10::Device(kDev, dev));
    throwIfFailed(shim::launchCollective(kernels::currentStream(dev), "stream_delay", seconds), "stream_delay");
  });
  // A kernel torch.compile's Inductor generated for the host (device memory is host-
  // addressable; cardsim_torch/inductor.py): runs kernel(*args) now, or at each replay of a
  // graph being captured, and times it as elementwise work over its operands: `read` and
  // `written`, the tensors among `args` it reads and writes.
  m.def("_launch_compiled", [](const std::string& name, py::function kernel, py::tuple args,
                               const std::vector<at::Tensor>& read, const std::vector<at::Tensor>& written) {
    c10::DeviceIndex dev = accel::currentDevice();
    std::vector<const at::Tensor*> touched;
    for (const auto* group : {&read, &written})
      for (const at::Tensor& t : *group) {
        if (t.defined() && t.device().type() == kDev) dev = t.device().index();
        touched.push_back(&t);
      }
    const shim::KernelCost cost = kernels::estimateCost(kernels::OpCost{kernels::CostKind::Elementwise}, read, written, dev);
    // Held by a replayable graph past this call: released with the GIL held.
    auto call = std::shared_ptr<std::pair<py::function, py::tuple>>(
        new std::pair<py::function, py::tuple>(std::move(kernel), std::move(args)), [](auto* p) {
          py::gil_scoped_acquire gil;
          delete p;
        });
    c10::DeviceGuard guard(c10::Device(kDev, dev));
    kernels::launch(dev, name.c_str(), cost, [call] {
      py::gil_scoped_acquire gil;
      call->first(*call->second);
    }, touched);
  });
  // The job's fabric server: start one in this process (returns its port), join one.
  // (port, Unix-domain address for the ranks on its host, "" where there is none)
  m.def("_fabric_serve", [](const std::string& bind, int port) {
    uint16_t bound = 0;
    std::string local;
    accel::start();
    throwIfFailed(shim::fabricServe(bind, static_cast<uint16_t>(port), &bound, &local), "fabricServe");
    return std::make_pair(static_cast<int>(bound), local);
  });
  m.def("_fabric_connect", [](const std::string& address, const std::string& job, int rank, int world,
                              double timeout_s) {
    py::gil_scoped_release nogil;
    accel::start();
    throwIfFailed(shim::fabricConnect(address, job, rank, world, timeout_s), "fabricConnect");
  }, py::arg("address"), py::arg("job"), py::arg("rank"), py::arg("world"), py::arg("timeout_s") = 30.0);
  m.def("_fabric_park", [](bool parked) {
    py::gil_scoped_release nogil;
    throwIfFailed(shim::fabricPark(parked), "fabricPark");
  });
  m.def("_fabric_gone", [](std::vector<int> ranks, double timeout_s) {
    std::vector<std::pair<int, std::string>> gone;
    {
      py::gil_scoped_release nogil;
      throwIfFailed(shim::fabricGone(ranks, timeout_s, &gone), "fabricGone");
    }
    return gone;
  }, py::arg("ranks"), py::arg("timeout_s") = 5.0);
  m.def("_fabric_address", [] {
    std::string a;
    accel::start();
    throwIfFailed(shim::fabricAddress(&a), "fabricAddress");
    return a;
  });
  // The vendor runtime's host-register calls return a status code: 0 on success.
  m.def("_host_register", [](uintptr_t ptr, size_t bytes) {
    // Start the runtime and tell ATen, which only consults an initialized device's hooks
    // for is_pinned().
    at::globalContext().lazyInitDevice(kDev);
    shim::Status s = shim::hostRegister(reinterpret_cast<void*>(ptr), bytes);
    return s.ok() ? 0 : static_cast<int>(s.code());
  });
  m.def("_host_unregister", [](uintptr_t ptr) {
    accel::start();
    shim::Status s = shim::hostUnregister(reinterpret_cast<void*>(ptr));
    return s.ok() ? 0 : static_cast<int>(s.code());
  });
  m.def("_error_string", [](int code) { return std::string(shim::codeName(static_cast<shim::Code>(code))); });
  m.def("_set_activity_recording", [](bool on) {
    accel::start();
    throwIfFailed(shim::setActivityRecording(on), "setActivityRecording");
  });
  // Completed device work since the last drain: (kind, torch device or -1, stream id, name,
  // start ns, end ns, flops, bytes).
  m.def("_drain_activities", [] {
    accel::start();
    std::vector<shim::ActivityRecord> recs;
    throwIfFailed(shim::drainActivities(&recs), "drainActivities");
    py::list out;
    for (const auto& r : recs)
      out.append(py::make_tuple(shim::activityKindName(r.kind), static_cast<int>(accel::fromShim(r.device)),
                                r.stream_id, r.name, r.start_ps / 1000.0, r.end_ps / 1000.0, r.flops, r.bytes));
    return out;
  });
  // The async checker (cardsim_torch/checker.py): operands of each operator, by stream.
  m.def("_check_enable", [](bool on) { throwIfFailed(shim::checkEnable(on), "checkEnable"); });
  m.def("_check_set_site", [](uint64_t site) { shim::checkSetSite(site); });
  m.def("_check_guard", [](bool on) { throwIfFailed(shim::checkGuardDeviceMemory(on), "checkGuardDeviceMemory"); });
  m.def("_check_window", [](bool open) { open ? shim::checkHostWindowOpen() : shim::checkHostWindowClose(); });
  m.def("_check_tensors", [](const std::vector<at::Tensor>& tensors, bool write) {
    for (const at::Tensor& t : tensors) {
      if (!t.defined() || t.numel() == 0 || !t.has_storage() || !t.storage().data()) continue;
      int64_t span = 1;   // elements from the first to the last one the view reaches
      for (int64_t d = 0; d < t.dim(); ++d) span += (t.size(d) - 1) * std::abs(t.stride(d));
      const size_t bytes = static_cast<size_t>(span) * t.element_size();
      if (t.device().type() == c10::DeviceType::PrivateUse1) {
        c10::DeviceGuard guard(t.device());   // a default stream (null handle) is the current device's
        (void)shim::checkDeviceAccess(kernels::currentStream(t.device().index()), t.data_ptr(), bytes, write);
      } else if (t.device().is_cpu()) {
        (void)shim::checkHostAccess(t.data_ptr(), bytes, write);
      }
    }
  });
  m.def("_check_pending", [] { return shim::checkPendingReports(); });
  m.def("_check_drain", [] {
    using namespace pybind11::literals;
    std::vector<shim::CheckReport> reports;
    throwIfFailed(shim::checkDrainReports(&reports), "checkDrainReports");
    auto side = [](const shim::CheckReport::Side& s) {
      return py::dict("site"_a = s.site, "host"_a = s.host, "stream"_a = s.stream_id, "device"_a = s.device,
                      "write"_a = s.write, "graph"_a = s.graph);
    };
    py::list out;
    for (const auto& r : reports)
      out.append(py::dict("kind"_a = shim::checkKindName(r.kind), "address"_a = r.address, "bytes"_a = r.bytes,
                          "memory_device"_a = r.memory_device, "producer"_a = side(r.producer),
                          "offender"_a = side(r.offender)));
    return out;
  });
  m.def("_fallback_operators", &kernels::fallbackOperators);
  m.def("_costed_operators", &kernels::costedOperators);
  m.def("_cpu_alias", [](const at::Tensor& t) {
    TORCH_CHECK(t.device().type() == kDev, "_cpu_alias expects a device tensor, got ", t.device());
    return kernels::cpuAlias(t);
  });
  m.def("_is_initialized", &accel::isReady);
  m.def("_default_generator", [](int64_t d) {
    return at::detail::getPrivateUse1Hooks().getDefaultGenerator(resolve(d));
  });
  py::class_<Graph>(m, "_Graph")
      .def(py::init<>())
      .def("capture_begin", &Graph::captureBegin, py::arg("stream_id"), py::arg("device"),
           py::arg("mode") = "global")
      .def("capture_end", &Graph::captureEnd)
      .def("replay", &Graph::replay, py::call_guard<py::gil_scoped_release>())
      .def("node_count", &Graph::nodes)
      .def("describe", &Graph::describe)
      .def("reset", &Graph::reset);
}
