// The `sim` backend: devices, kernel and collective launches, simulated time, activities.
#include "SimBackend.h"
#include "simulator/FabricConfig.h"

namespace cardsim::shim::simbackend {

Status SimBackend::getDeviceCount(int* count) {
  if (!count) return nullArg("getDeviceCount", "count");
  *count = devices_;
  return Status::Ok();
}

Status SimBackend::setDevice(int device) {
  if (device < 0 || device >= devices_) return invalidDevice(device, devices_);
  t_current_device = device;
  return Status::Ok();
}

Status SimBackend::getDevice(int* device) {
  if (!device) return nullArg("getDevice", "device");
  *device = t_current_device;
  return Status::Ok();
}

Status SimBackend::getDeviceProperties(DeviceProperties* p, int device) {
  if (!p) return nullArg("getDeviceProperties", "props");
  if (device < 0 || device >= devices_) return invalidDevice(device, devices_);
  const auto& c = params_.compute;
  auto peak = [&](model::DType t) { return c.peak_ops_per_s[static_cast<size_t>(t)]; };
  p->name = params_.name;
  p->vendor = params_.vendor;
  p->preset = params_.preset;
  p->backend = "sim";
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
  auto vec = [&](model::DType t) { return c.vector_peak_ops_per_s[static_cast<size_t>(t)]; };
  p->vector_peak_fp64_flops = vec(model::DType::FP64);
  p->vector_peak_fp32_flops = vec(model::DType::FP32);
  p->vector_peak_fp16_flops = vec(model::DType::FP16);
  p->vector_peak_bf16_flops = vec(model::DType::BF16);
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

Status SimBackend::deviceSynchronize() {
  {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    for (StreamObject* st : streams_)
      if (st->device == t_current_device && capturing(st))
        return breakCapture(st, "deviceSynchronize");
  }
  if (Status st = checkUnsafeCall("deviceSynchronize"); !st.ok()) return st;
  return guard([&] {
    sim_.waitFor(sim_.deviceTails(dev(t_current_device)), params_.host.sync_overhead_s);
    return Status::Ok();
  });
}

Status SimBackend::waitForQueuedWork() {
  std::vector<bool> capturing_on(static_cast<size_t>(devices_), false);
  {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    for (StreamObject* st : streams_)
      if (st->device >= 0 && st->device < devices_ && capturing(st)) capturing_on[static_cast<size_t>(st->device)] = true;
  }
  std::vector<model::QueuePoint> points;
  for (int d = 0; d < devices_; ++d)
    if (!capturing_on[static_cast<size_t>(d)])
      for (const model::QueuePoint& p : sim_.deviceTails(dev(d))) points.push_back(p);
  // No overhead: the host clock moves only if the work ends after it.
  return guard([&] {
    sim_.waitFor(std::move(points), 0);
    return Status::Ok();
  });
}

std::string SimBackend::captureInProgress() {
  std::lock_guard<std::mutex> lock(streams_mutex_);
  for (StreamObject* st : streams_)
    if (capturing(st)) return "stream " + std::to_string(st->id) + " of device " + std::to_string(st->device);
  return {};
}

Status SimBackend::deviceCanAccessPeer(int* can, int device, int peer) {
  if (!can) return nullArg("deviceCanAccessPeer", "can_access");
  if (device < 0 || device >= devices_) return invalidDevice(device, devices_);
  if (peer < 0 || peer >= devices_) return invalidDevice(peer, devices_);
  *can = device != peer ? 1 : 0;   // every pair shares a PCIe root in the model
  return Status::Ok();
}

Status SimBackend::launchKernel(Stream stream, std::string_view kname, const KernelCost& cost,
                    const std::function<void()>& work) {
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
  cmd.in_graph = cost.graph_node;
  if (capturing(s)) return record(s, kname, work, std::move(cmd), /*held_only=*/timing_);
  if (work && !timing_) {
    try {
      work();
    } catch (const std::exception& e) {
      return Status(Code::KernelFailed, "kernel '" + std::string(kname) + "' failed: " + e.what());
    } catch (...) {
      return Status(Code::KernelFailed, "kernel '" + std::string(kname) + "' failed");
    }
  }
  return submitAndMaybeWait(s, std::move(cmd), kname, cost.graph_node ? 0.0 : params_.host.launch_overhead_s, false);
}

Status SimBackend::launchCollective(Stream stream, std::string_view cname, double seconds) {
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

Status SimBackend::hostTimePs(uint64_t* ps) {
  if (!ps) return nullArg("hostTimePs", "ps");
  *ps = sim_.hostNow();
  return Status::Ok();
}

Status SimBackend::hostClockShareBegin() {
  sim_.shareHostClockBegin();
  return Status::Ok();
}

Status SimBackend::hostClockShareEnd() {
  sim_.shareHostClockEnd();
  return Status::Ok();
}

Status SimBackend::hostClockJoin(uint64_t ps) {
  sim_.hostClockJoin(ps);
  return Status::Ok();
}

Status SimBackend::hostThreadClock(uint64_t* ps, bool* started) {
  if (!ps || !started) return nullArg("hostThreadClock", "ps/started");
  *started = sim_.hostClockStarted();
  *ps = *started ? sim_.hostNow() : 0;
  return Status::Ok();
}

Status SimBackend::setActivityRecording(bool on) {
  sim_.setRecording(on);
  return Status::Ok();
}

Status SimBackend::drainActivities(std::vector<ActivityRecord>* out) {
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
    r.correlation = a.correlation;
    out->push_back(std::move(r));
  }
  return Status::Ok();
}

Status SimBackend::deviceUsage(int device, uint64_t* used, uint64_t* total, double* busy_cluster_s,
                               double* busy_memory_s) {
  if (device < 0 || device >= devices_) return invalidDevice(device, devices_);
  *used = memory_.used(device);
  *total = memory_.capacity(device);
  if (!busy_cluster_s && !busy_memory_s) return Status::Ok();
  return guard([&] {
    const sim::DeviceCounters c = sim_.counters(dev(device));
    if (busy_cluster_s) *busy_cluster_s = c.cluster_busy_seconds;
    if (busy_memory_s) *busy_memory_s = c.memory_busy_seconds;
    return Status::Ok();
  });
}

}  // namespace cardsim::shim::simbackend

namespace cardsim::shim {
std::unique_ptr<IBackend> createSimBackend(const InitOptions& options, Status* why) {
  try {
    sim::SimOptions defaults;
    sim::SimOptions o = sim::SimOptions::fromEnvironment(defaults);
    if (!options.preset.empty()) o.preset = options.preset;
    if (options.devices > 0) o.devices = options.devices;
    if (!options.overrides_file.empty()) o.overrides_file = options.overrides_file;
    o.overrides = options.overrides;
    sim::Simulator& sim = sim::Simulator::start(o);
    // The fabric is optional: a preset without one still runs everything but collectives.
    // (Loaded once, by the simulator: its peer copies cross the same fabric.)
    std::unique_ptr<sim::FabricModel> fabric;
    std::string fabric_error = sim.fabricError();
    if (const fabric::FabricParams* p = sim.fabricParams()) {
      try {
        fabric = std::make_unique<sim::FabricModel>(*p);
      } catch (const std::exception& e) {
        fabric_error = e.what();
      }
    }
    return std::make_unique<simbackend::SimBackend>(sim, std::move(fabric), std::move(fabric_error),
                                                    options.execution == "timing", !options.move_data);
  } catch (const std::exception& e) {
    *why = Status(Code::InitFailed, e.what());
    return nullptr;
  }
}

}  // namespace cardsim::shim
