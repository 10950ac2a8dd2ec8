// torch.profiler shows the card: a Kineto activity profiler for PrivateUse1 (registered with
// torch's PrivateUse1ProfilerRegistry) that turns the model's activity records into device
// slices. Kernels, copies, memsets and collectives land on one track per device and stream
// with their simulated durations and gaps (nanoseconds: Kineto's unit), and each is linked
// to the CPU operator that launched it through the correlation id Kineto pushes when the
// operator begins (the shim stamps it on the commands the thread submits).
#include <IActivityProfiler.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <algorithm>
#include <string>
#include <vector>

#include <cardsim/shim.h>

#include "DeviceRuntime.h"

namespace cardsim::accel {
namespace {

using libkineto::ActivityType;

// Correlation ids pushed by Kineto as operators begin, per host thread; the innermost is
// stamped on every command the thread submits.
thread_local std::vector<uint64_t> t_correlations;

int64_t wallNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

ActivityType typeOf(shim::ActivityRecord::Kind k) {
  using K = shim::ActivityRecord::Kind;
  switch (k) {
    case K::MemcpyHtoD:
    case K::MemcpyDtoH:
    case K::MemcpyDtoD:
    case K::MemcpyPeer:
      return ActivityType::GPU_MEMCPY;
    case K::Memset:
      return ActivityType::GPU_MEMSET;
    default:
      return ActivityType::CONCURRENT_KERNEL;
  }
}

class Session final : public libkineto::IActivityProfilerSession {
 public:
  explicit Session(std::set<ActivityType> types) : types_(std::move(types)) {}

  void start() override {
    std::vector<shim::ActivityRecord> stale;
    (void)shim::setActivityRecording(true);
    (void)shim::drainActivities(&stale);   // what completed before the profile is not in it
    uint64_t ps = 0;
    (void)shim::hostTimePs(&ps);
    start_ps_ = ps;
    start_wall_ns_ = wallNs();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    // The work the profiled region queued completes in simulated time before it is shown.
    int current = 0;
    (void)shim::getDevice(&current);
    for (int d = 0, n = deviceCount(); d < n; ++d) {
      (void)shim::setDevice(toShim(static_cast<c10::DeviceIndex>(d)));
      (void)shim::deviceSynchronize();
    }
    (void)shim::setDevice(current);
    (void)shim::drainActivities(&records_);
    (void)shim::setActivityRecording(false);
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t /*start*/, int64_t /*end*/) override {
    span_ = std::make_unique<libkineto::TraceSpan>(start_wall_ns_, start_wall_ns_, "cardsim");
    // Simulated time runs at its own pace and the emulating host at its own: the device
    // tracks keep the simulated durations and order, and are moved later where needed so
    // that no slice starts before the operator that launched it (the shift only grows,
    // as a card waits for a slow host); "simulated start us" keeps the model's own time.
    const auto at = [&](uint64_t ps) {
      return start_wall_ns_ + (static_cast<int64_t>(ps) - static_cast<int64_t>(start_ps_)) / 1000;
    };
    std::vector<const shim::ActivityRecord*> order;
    for (const shim::ActivityRecord& r : records_)
      if (r.kind != shim::ActivityRecord::Kind::EventRecord && r.kind != shim::ActivityRecord::Kind::EventWait &&
          types_.count(typeOf(r.kind)))
        order.push_back(&r);
    std::stable_sort(order.begin(), order.end(), [](const shim::ActivityRecord* a, const shim::ActivityRecord* b) {
      return a->start_ps < b->start_ps;
    });
    std::vector<std::tuple<const shim::ActivityRecord*, const libkineto::ITraceActivity*, int64_t>> shown;
    int64_t shift = 0;
    for (const shim::ActivityRecord* r : order) {
      const libkineto::ITraceActivity* op = r->correlation ? linked(static_cast<int32_t>(r->correlation)) : nullptr;
      if (op) shift = std::max(shift, op->timestamp() - at(r->start_ps));
      shown.emplace_back(r, op, shift);
    }
    for (const auto& [rp, op, moved] : shown) {
      const shim::ActivityRecord& r = *rp;
      auto& a = activities_.emplace_back(*span_, typeOf(r.kind), r.name);
      a.startTime = at(r.start_ps) + moved;
      a.endTime = at(r.end_ps) + moved;
      a.device = static_cast<int32_t>(fromShim(r.device));
      a.resource = static_cast<int32_t>(r.stream_id);
      a.id = static_cast<int32_t>(r.correlation);
      if (op) {
        a.linked = op;
        a.flow.id = static_cast<uint32_t>(r.correlation);
        a.flow.type = libkineto::kLinkAsyncCpuGpu;
        a.flow.start = false;
      }
      a.addMetadataQuoted("device", personality().device + ":" + std::to_string(a.device));
      a.addMetadata("stream", r.stream_id);
      a.addMetadataQuoted("kind", shim::activityKindName(r.kind));
      if (r.bytes) a.addMetadata("bytes", r.bytes);
      if (r.flops > 0) a.addMetadata("flops", r.flops);
      a.addMetadata("simulated start us", (static_cast<int64_t>(r.start_ps) - static_cast<int64_t>(start_ps_)) / 1e6);
      streams_.emplace(std::make_pair(a.device, a.resource), 0);
      logger.handleGenericActivity(a);
    }
    status_ = libkineto::TraceStatus::READY;
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{
        0, 0, personality().device + " (cardsim, simulated time)", personality().device + ":0"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (const auto& [key, unused] : streams_)
      out.push_back(libkineto::ResourceInfo{key.second, key.second, key.first,
                                            personality().device + ":" + std::to_string(key.first) + " stream " +
                                                std::to_string(key.second)});
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  void pushCorrelationId(uint64_t id) override {
    t_correlations.push_back(id);
    shim::setCorrelationId(id);
  }

  void popCorrelationId() override {
    if (!t_correlations.empty()) t_correlations.pop_back();
    shim::setCorrelationId(t_correlations.empty() ? 0 : t_correlations.back());
  }

 private:
  std::set<ActivityType> types_;
  uint64_t start_ps_ = 0;
  int64_t start_wall_ns_ = 0;
  std::vector<shim::ActivityRecord> records_;
  std::unique_ptr<libkineto::TraceSpan> span_;
  std::deque<libkineto::GenericTraceActivity> activities_;   // the logger may keep pointers
  std::map<std::pair<int32_t, int32_t>, int> streams_;
};

class CardsimActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override { return types_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& activity_types,
                                                                 const libkineto::Config& /*config*/) override {
    std::set<ActivityType> wanted;
    for (ActivityType t : activity_types)
      if (types_.count(t)) wanted.insert(t);
    if (wanted.empty()) return nullptr;
    return std::make_unique<Session>(std::move(wanted));
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t /*ts_ms*/, int64_t /*duration_ms*/,
                                                                 const std::set<ActivityType>& activity_types,
                                                                 const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"cardsim"};
  std::set<ActivityType> types_{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
                                ActivityType::GPU_MEMSET};
};

}  // namespace
}  // namespace cardsim::accel

using CardsimActivityProfiler = cardsim::accel::CardsimActivityProfiler;
REGISTER_PRIVATEUSE1_PROFILER(CardsimActivityProfiler);
