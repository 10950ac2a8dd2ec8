#include "DeviceRuntime.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "DeviceAllocator.h"
#include "DeviceGenerator.h"
#include "KernelLaunch.h"

namespace cardsim::accel {

using kernels::throwIfFailed;
constexpr auto kDev = c10::DeviceType::PrivateUse1;

namespace {

std::mutex g_mutex;
Personality g_personality{"privateuseone", "", ""};
std::atomic<bool> g_ready{false};
std::vector<int> g_visible;         // torch index -> shim device
int g_shim_count = 0;

// Streams: torch StreamId -> shim stream. Id 0 is the default stream of every device.
std::mutex g_stream_mutex;
std::vector<std::pair<shim::Stream, c10::DeviceIndex>> g_streams{{nullptr, -1}};
constexpr int kMaxDevices = 64;
thread_local c10::StreamId t_current_stream[kMaxDevices] = {};
thread_local c10::DeviceIndex t_current_device = 0;
// The shim keeps its own per-thread current device, numbered physically: a new thread
// must point it at torch's device 0, which need not be physical device 0.
thread_local bool t_synced = false;
int g_least = 0, g_greatest = 0;    // the shim's priority range
std::vector<std::vector<c10::StreamId>> g_pool[2];
std::vector<size_t> g_pool_next[2];
constexpr size_t kPoolSize = 4;

std::vector<int> parseVisible(const std::string& var, const std::string& value, int count) {
  std::vector<int> out;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    TORCH_CHECK(b != std::string::npos, var, "=\"", value, "\": empty entry in the list");
    item = item.substr(b, e - b + 1);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    TORCH_CHECK(end && *end == '\0', var, "=\"", value, "\": \"", item,
                      "\" is not a device number");
    TORCH_CHECK(v >= 0 && v < count, var, "=\"", value, "\": device ", v,
                      " does not exist (", count, " device(s): 0..", count - 1, ")");
    for (int seen : out)
      TORCH_CHECK(seen != v, var, "=\"", value, "\": device ", v, " is listed twice");
    out.push_back(static_cast<int>(v));
  }
  return out;
}

void ensureReady() {
  if (g_ready) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_ready) return;
  shim::InitOptions opts;
  const char* preset = std::getenv("CARDSIM_PRESET");
  if (!(preset && *preset)) opts.preset = g_personality.default_preset;
  throwIfFailed(shim::initialize(opts), ("starting the emulated " + g_personality.device + " devices").c_str());
  throwIfFailed(shim::getDeviceCount(&g_shim_count), "getDeviceCount");
  const char* vis = g_personality.visible_env.empty() ? nullptr : std::getenv(g_personality.visible_env.c_str());
  if (vis) {
    g_visible = parseVisible(g_personality.visible_env, vis, g_shim_count);
  } else {
    for (int i = 0; i < g_shim_count; ++i) g_visible.push_back(i);
  }
  TORCH_CHECK(g_visible.size() <= static_cast<size_t>(kMaxDevices), g_shim_count,
                    " devices configured (CARDSIM_DEVICES); torch_", g_personality.device,
                    " supports at most ", kMaxDevices, " per process");
  throwIfFailed(shim::deviceGetStreamPriorityRange(&g_least, &g_greatest), "stream priority range");
  for (auto& p : g_pool) p.assign(g_visible.size(), {});
  for (auto& n : g_pool_next) n.assign(g_visible.size(), 0);
  g_ready = true;
}

// Shim priority for a torch priority (0 = default/lowest, negative = higher).
int toShimPriority(int p) {
  const int step = g_greatest < g_least ? 1 : -1;
  return g_least + p * step;
}

}  // namespace

void activate(const Personality& p) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_personality = p;
}
const Personality& personality() { return g_personality; }
bool isReady() { return g_ready; }

void start() { ensureReady(); }

int deviceCount() {
  ensureReady();
  return static_cast<int>(g_visible.size());
}

void checkIndex(c10::DeviceIndex index) {
  const int n = deviceCount();
  TORCH_CHECK(index >= 0 && index < n, "invalid ", g_personality.device, " device index ",
                    int(index), ": ", n, " device(s) visible",
                    n > 0 ? " (0.." + std::to_string(n - 1) + ")" : std::string(),
                    g_personality.visible_env.empty() ? "" : "; see " + g_personality.visible_env);
}

int toShim(c10::DeviceIndex index) {
  checkIndex(index);
  return g_visible[static_cast<size_t>(index)];
}

c10::DeviceIndex fromShim(int shim_device) {
  ensureReady();
  for (size_t i = 0; i < g_visible.size(); ++i)
    if (g_visible[i] == shim_device) return static_cast<c10::DeviceIndex>(i);
  return -1;
}

c10::DeviceIndex currentDevice() {
  ensureReady();
  if (!t_synced && !g_visible.empty()) {
    throwIfFailed(shim::setDevice(g_visible[static_cast<size_t>(t_current_device)]), "setDevice");
    t_synced = true;
  }
  return t_current_device;
}

void setCurrentDevice(c10::DeviceIndex index) {
  if (index == t_current_device && t_synced) return;
  const int s = toShim(index);
  throwIfFailed(shim::setDevice(s), "setDevice");
  t_current_device = index;
  t_synced = true;
}

c10::Stream defaultStream(c10::DeviceIndex index) {
  return c10::Stream(c10::Stream::DEFAULT, c10::Device(kDev, index));
}

c10::Stream currentStream(c10::DeviceIndex index) {
  if (index < 0) index = currentDevice();
  checkIndex(index);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDev, index), t_current_stream[index]);
}

c10::Stream newStream(c10::DeviceIndex index, int priority) {
  if (index < 0) index = currentDevice();
  const int dev = toShim(index);
  int prev = 0;
  throwIfFailed(shim::getDevice(&prev), "getDevice");
  throwIfFailed(shim::setDevice(dev), "setDevice");
  shim::Stream s = nullptr;
  shim::Status st = shim::streamCreate(&s, toShimPriority(std::clamp(priority, greatestPriority(), 0)));
  (void)shim::setDevice(prev);
  throwIfFailed(st, "streamCreate");
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  g_streams.emplace_back(s, index);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDev, index),
                     static_cast<c10::StreamId>(g_streams.size() - 1));
}

c10::Stream poolStream(c10::DeviceIndex index, bool high_priority) {
  if (index < 0) index = currentDevice();
  checkIndex(index);
  const int k = high_priority ? 1 : 0;
  {
    std::lock_guard<std::mutex> lock(g_stream_mutex);
    auto& pool = g_pool[k][static_cast<size_t>(index)];
    if (pool.size() >= kPoolSize) {
      const size_t i = g_pool_next[k][static_cast<size_t>(index)]++ % kPoolSize;
      return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDev, index), pool[i]);
    }
  }
  c10::Stream s = newStream(index, high_priority ? greatestPriority() : 0);
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  g_pool[k][static_cast<size_t>(index)].push_back(s.id());
  return s;
}

void setCurrentStream(const c10::Stream& s) {
  TORCH_CHECK(s.device_type() == kDev, "expected a ", g_personality.device, " stream, got one of ",
              s.device());
  checkIndex(s.device_index());
  t_current_stream[s.device_index()] = s.id();
}

shim::Stream shimStream(const c10::Stream& s) {
  if (s.id() == 0) return nullptr;
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  TORCH_CHECK(s.id() > 0 && static_cast<size_t>(s.id()) < g_streams.size(), "unknown ",
              g_personality.device, " stream id ", s.id());
  return g_streams[static_cast<size_t>(s.id())].first;
}

int streamPriority(const c10::Stream& s) {
  if (s.id() == 0) return 0;
  int p = 0;
  throwIfFailed(shim::streamGetPriority(shimStream(s), &p), "streamGetPriority");
  const int step = g_greatest < g_least ? 1 : -1;
  return -std::abs((p - g_least) / step);
}

int greatestPriority() {
  ensureReady();
  // torch exposes at most four levels, -3..0, whatever the queue range (as torch_mlu does).
  const int step = g_greatest < g_least ? 1 : -1;
  return std::max(-3, -std::abs((g_greatest - g_least) / step));
}

namespace {

// Runs `f` with the shim's current device set to the torch device `index`.
template <typename F>
auto onDevice(c10::DeviceIndex index, F&& f) {
  const c10::DeviceIndex prev = currentDevice();
  if (index == prev) return f();
  setCurrentDevice(index);
  struct Restore {
    c10::DeviceIndex d;
    ~Restore() { try { setCurrentDevice(d); } catch (...) {} }
  } restore{prev};
  return f();
}

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDev; }
  c10::Device exchangeDevice(c10::Device d) const override {
    const c10::DeviceIndex prev = currentDevice();
    if (d.index() != prev) setCurrentDevice(d.index());
    return c10::Device(kDev, prev);
  }
  c10::Device getDevice() const override { return c10::Device(kDev, currentDevice()); }
  void setDevice(c10::Device d) const override { setCurrentDevice(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    try { setCurrentDevice(d.index()); } catch (...) {}
  }
  c10::Stream getStream(c10::Device d) const override { return currentStream(d.index()); }
  c10::Stream getDefaultStream(c10::Device d) const override { return defaultStream(d.index()); }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    return newStream(d.index(), priority);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high) const override {
    return poolStream(d.index(), high);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    c10::Stream prev = currentStream(s.device_index());
    setCurrentStream(s);
    return prev;
  }
  void* getStreamNativeHandle(const c10::Stream s) const override { return shimStream(s); }
  // torch.accelerator.get_device_capability: every dtype but the quantized ones (the host
  // kernels take any dense dtype; quantized tensors are a backend of their own).
  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    c10::DeviceCapability cap;
    auto& t = cap.capability_data.supported_scalar_types;
    t.has_QInt8 = t.has_QUInt8 = t.has_QInt32 = t.has_QUInt4x2 = t.has_QUInt2x4 = 0;
    return cap;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    try { return static_cast<c10::DeviceIndex>(accel::deviceCount()); } catch (...) { return 0; }
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "event device index ", int(device_index), " does not match the stream's device ",
                int(stream.device_index()));
    onDevice(stream.device_index(), [&] {
      auto* e = static_cast<shim::Event>(*event);
      if (!e) {
        const unsigned flags = flag == c10::EventFlag::BACKEND_DEFAULT ? shim::kEventDefault
                                                                       : shim::kEventDisableTiming;
        throwIfFailed(shim::eventCreate(&e, flags), "eventCreate");
        *event = e;
      }
      throwIfFailed(shim::eventRecord(e, shimStream(stream)), "eventRecord");
      return 0;
    });
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (!event) return;
    onDevice(stream.device_index(), [&] {
      throwIfFailed(shim::streamWaitEvent(shimStream(stream), static_cast<shim::Event>(event)),
                    "streamWaitEvent");
      return 0;
    });
  }
  bool queryEvent(void* event) const override {
    if (!event) return true;
    shim::Status s = shim::eventQuery(static_cast<shim::Event>(event));
    if (s.code() == shim::Code::NotReady) return false;
    throwIfFailed(s, "eventQuery");
    return true;
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event) (void)shim::eventDestroy(static_cast<shim::Event>(event));
  }
  void synchronizeEvent(void* event) const override {
    if (event) throwIfFailed(shim::eventSynchronize(static_cast<shim::Event>(event)), "eventSynchronize");
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "both events must be recorded before measuring elapsed time");
    float ms = 0;
    throwIfFailed(shim::eventElapsedTime(&ms, static_cast<shim::Event>(start),
                                         static_cast<shim::Event>(end)),
                  "eventElapsedTime");
    return ms;
  }
  bool queryStream(const c10::Stream& stream) const override {
    return onDevice(stream.device_index(), [&] {
      shim::Status s = shim::streamQuery(shimStream(stream));
      if (s.code() == shim::Code::NotReady) return false;
      throwIfFailed(s, "streamQuery");
      return true;
    });
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    onDevice(stream.device_index(), [&] {
      throwIfFailed(shim::streamSynchronize(shimStream(stream)), "streamSynchronize");
      return 0;
    });
  }
  bool isStreamCapturing(const c10::Stream& stream) const override {
    bool c = false;
    if (stream.id() == 0) return false;
    throwIfFailed(shim::streamIsCapturing(shimStream(stream), &c), "streamIsCapturing");
    return c;
  }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    onDevice(index < 0 ? currentDevice() : index, [&] {
      throwIfFailed(shim::deviceSynchronize(), "deviceSynchronize");
      return 0;
    });
  }
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    deviceAllocator().recordStream(data_ptr, stream);
  }
};

struct Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override {
    try { return deviceCount() > 0; } catch (...) { return false; }
  }
  void init() const override { (void)deviceCount(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return g_ready; }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(accel::deviceCount());
  }
  void setCurrentDevice(c10::DeviceIndex d) const override { accel::setCurrentDevice(d); }
  c10::DeviceIndex getCurrentDevice() const override { return currentDevice(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    const c10::DeviceIndex prev = currentDevice();
    accel::setCurrentDevice(d);
    return prev;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex d) const override {
    if (d < 0) d = currentDevice();
    checkIndex(d);
    return kernels::defaultDeviceGenerator(d);
  }
  at::Generator getNewGenerator(c10::DeviceIndex d) const override {
    if (d < 0) d = currentDevice();
    checkIndex(d);
    return at::make_generator<kernels::DeviceGenerator>(d);
  }
  c10::Device getDeviceFromPtr(void* data) const override {
    shim::PointerAttributes a;
    throwIfFailed(shim::pointerGetAttributes(&a, data), "pointerGetAttributes");
    TORCH_CHECK(a.type == shim::PointerAttributes::Type::Device, "pointer ", data,
                " is not ", g_personality.device, " device memory");
    return c10::Device(kDev, fromShim(a.device));
  }
  bool isPinnedPtr(const void* data) const override {
    if (!g_ready) return false;   // nothing can be pinned before the runtime starts
    shim::PointerAttributes a;
    return shim::pointerGetAttributes(&a, data).ok() && a.type == shim::PointerAttributes::Type::Host;
  }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    (void)accel::deviceCount();
    return &pinnedAllocator();
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    kernels::resizeStorage(storage, newsize);
  }
};

Hooks g_hooks;

}  // namespace

void registerHooks() { at::RegisterPrivateUse1HooksInterface(&g_hooks); }

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

}  // namespace cardsim::accel
