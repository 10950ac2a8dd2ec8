// Cambricon's CNRT (libcnrt.so) behind IVendorRuntime. Prototypes, enum values and
// argument orders follow CNRT 6.x's public cnrt.h: the queue comes before the direction in
// cnrtMemcpyAsync, the notifier before the queue in cnrtQueueWaitNotifier, output pointers
// last in cnrtNotifierElapsedTime, priorities 7 (least) .. 0 (greatest).
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "native/DynamicLibrary.h"
#include "native/VendorRuntime.h"

namespace cardsim::shim::native {
namespace {

using cnrtRet = int;   // cnrtRet_t
using Queue = void*;   // cnrtQueue_t
using Notifier = void*;

// cnrtRet_t values (cnrt.h).
constexpr cnrtRet kSuccess = 0;
constexpr cnrtRet kNotReady = 1;
constexpr cnrtRet kBusy = 632014;   // what queue/notifier queries report while work runs

// cnrtMemTransDir_t
constexpr int kHostToDev = 0, kDevToDev = 1, kDevToHost = 2, kHostToHost = 3, kNoDirection = 5;
// cnrtNotifierFlags_t
constexpr unsigned kNotifierDisableTimingAll = 0x4, kNotifierInterprocess = 0x8;
// cnrtDeviceAttr_t
constexpr int kAttrCapMajor = 0x01, kAttrCapMinor = 0x02, kAttrClusterCount = 0x205,
              kAttrMcorePerCluster = 0x206, kAttrIpuClockKHz = 0x402, kAttrTotalMemMB = 0x405;

struct Api {
  cnrtRet (*GetDeviceCount)(unsigned*);
  cnrtRet (*GetDevice)(int*);
  cnrtRet (*SetDevice)(int);
  cnrtRet (*SyncDevice)();
  cnrtRet (*DeviceGetAttribute)(int*, int, int);
  cnrtRet (*GetPeerAccessibility)(unsigned*, int, int);
  const char* (*GetErrorStr)(cnrtRet);
  const char* (*GetErrorName)(cnrtRet);   // optional
  cnrtRet (*GetLibVersion)(int*, int*, int*);
  cnrtRet (*GetDeviceProperties)(void*, int);   // optional; only the leading name is read
  cnrtRet (*Malloc)(void**, size_t);
  cnrtRet (*Free)(void*);
  cnrtRet (*MemGetInfo)(size_t*, size_t*);
  cnrtRet (*HostMalloc)(void**, size_t);
  cnrtRet (*FreeHost)(void*);
  cnrtRet (*Memcpy)(void*, void*, size_t, int);
  cnrtRet (*MemcpyAsync)(void*, void*, size_t, Queue, int);
  cnrtRet (*MemcpyPeerAsync)(void*, int, void*, int, size_t, Queue);
  cnrtRet (*Memset)(void*, int, size_t);
  cnrtRet (*MemsetAsync)(void*, int, size_t, Queue);
  cnrtRet (*QueueCreateWithPriority)(Queue*, unsigned, int);
  cnrtRet (*QueueDestroy)(Queue);
  cnrtRet (*QueueSync)(Queue);
  cnrtRet (*QueueQuery)(Queue);
  cnrtRet (*QueueGetPriority)(Queue, int*);
  cnrtRet (*DeviceGetQueuePriorityRange)(int*, int*);
  cnrtRet (*QueueWaitNotifier)(Notifier, Queue, unsigned);
  cnrtRet (*NotifierCreateWithFlags)(Notifier*, unsigned);
  cnrtRet (*NotifierDestroy)(Notifier);
  cnrtRet (*PlaceNotifier)(Notifier, Queue);
  cnrtRet (*QueryNotifier)(Notifier);
  cnrtRet (*WaitNotifier)(Notifier);
  cnrtRet (*NotifierElapsedTime)(Notifier, Notifier, float*);
};

class CnrtRuntime final : public IVendorRuntime {
 public:
  Status open(const std::string& path) {
    if (Status st = lib_.open(path); !st.ok()) return st;
    lib_.bind("cnrtGetDeviceCount", api_.GetDeviceCount);
    lib_.bind("cnrtGetDevice", api_.GetDevice);
    lib_.bind("cnrtSetDevice", api_.SetDevice);
    lib_.bind("cnrtSyncDevice", api_.SyncDevice);
    lib_.bind("cnrtDeviceGetAttribute", api_.DeviceGetAttribute);
    lib_.bind("cnrtGetPeerAccessibility", api_.GetPeerAccessibility);
    lib_.bind("cnrtGetErrorStr", api_.GetErrorStr);
    lib_.bindOptional("cnrtGetErrorName", api_.GetErrorName);
    lib_.bind("cnrtGetLibVersion", api_.GetLibVersion);
    lib_.bindOptional("cnrtGetDeviceProperties_V3", api_.GetDeviceProperties);
    lib_.bind("cnrtMalloc", api_.Malloc);
    lib_.bind("cnrtFree", api_.Free);
    lib_.bind("cnrtMemGetInfo", api_.MemGetInfo);
    lib_.bind("cnrtHostMalloc", api_.HostMalloc);
    lib_.bind("cnrtFreeHost", api_.FreeHost);
    lib_.bind("cnrtMemcpy", api_.Memcpy);
    lib_.bind("cnrtMemcpyAsync", api_.MemcpyAsync);
    lib_.bind("cnrtMemcpyPeerAsync", api_.MemcpyPeerAsync);
    lib_.bind("cnrtMemset", api_.Memset);
    lib_.bind("cnrtMemsetAsync", api_.MemsetAsync);
    lib_.bind("cnrtQueueCreateWithPriority", api_.QueueCreateWithPriority);
    lib_.bind("cnrtQueueDestroy", api_.QueueDestroy);
    lib_.bind("cnrtQueueSync", api_.QueueSync);
    lib_.bind("cnrtQueueQuery", api_.QueueQuery);
    lib_.bind("cnrtQueueGetPriority", api_.QueueGetPriority);
    lib_.bind("cnrtDeviceGetQueuePriorityRange", api_.DeviceGetQueuePriorityRange);
    lib_.bind("cnrtQueueWaitNotifier", api_.QueueWaitNotifier);
    lib_.bind("cnrtNotifierCreateWithFlags", api_.NotifierCreateWithFlags);
    lib_.bind("cnrtNotifierDestroy", api_.NotifierDestroy);
    lib_.bind("cnrtPlaceNotifier", api_.PlaceNotifier);
    lib_.bind("cnrtQueryNotifier", api_.QueryNotifier);
    lib_.bind("cnrtWaitNotifier", api_.WaitNotifier);
    lib_.bind("cnrtNotifierElapsedTime", api_.NotifierElapsedTime);
    if (Status st = lib_.complete(); !st.ok()) return st;
    int maj = 0, min = 0, patch = 0;
    if (api_.GetLibVersion(&maj, &min, &patch) == kSuccess)
      version_ = std::to_string(maj) + "." + std::to_string(min) + "." + std::to_string(patch);
    return Status::Ok();
  }

  const char* runtimeName() const override { return "CNRT"; }
  std::string libraryPath() const override { return lib_.path(); }
  std::string version() const override { return version_; }

  Status deviceCount(int* count) override {
    unsigned n = 0;
    Status st = check(api_.GetDeviceCount(&n), "cnrtGetDeviceCount");
    *count = static_cast<int>(n);
    return st;
  }
  Status setDevice(int d) override { return check(api_.SetDevice(d), "cnrtSetDevice"); }
  Status getDevice(int* d) override { return check(api_.GetDevice(d), "cnrtGetDevice"); }
  Status synchronizeDevice() override { return check(api_.SyncDevice(), "cnrtSyncDevice"); }
  Status canAccessPeer(int* can, int device, int peer) override {
    unsigned c = 0;
    Status st = check(api_.GetPeerAccessibility(&c, device, peer), "cnrtGetPeerAccessibility");
    *can = c ? 1 : 0;
    return st;
  }
  Status deviceProperties(DeviceProperties* p, int device) override {
    auto attr = [&](int which, const char* name, int* out) {
      Status st = check(api_.DeviceGetAttribute(out, which, device), "cnrtDeviceGetAttribute");
      return st.ok() ? st : Status(st.code(), st.message() + " (" + name + ")");
    };
    int mem_mb = 0, clusters = 0, cores = 0, major = 0, minor = 0, khz = 0;
    if (Status st = attr(kAttrTotalMemMB, "cnrtAttrTotalMemSize", &mem_mb); !st.ok()) return st;
    if (Status st = attr(kAttrClusterCount, "cnrtAttrClusterCount", &clusters); !st.ok()) return st;
    if (Status st = attr(kAttrMcorePerCluster, "cnrtAttrMcorePerCluster", &cores); !st.ok()) return st;
    if (Status st = attr(kAttrCapMajor, "cnrtAttrComputeCapabilityMajor", &major); !st.ok()) return st;
    if (Status st = attr(kAttrCapMinor, "cnrtAttrComputeCapabilityMinor", &minor); !st.ok()) return st;
    if (Status st = attr(kAttrIpuClockKHz, "cnrtAttrIpuClockRate", &khz); !st.ok()) return st;
    p->total_memory_bytes = uint64_t(mem_mb) << 20;
    p->cluster_count = static_cast<uint32_t>(clusters);
    p->cores_per_cluster = static_cast<uint32_t>(cores);
    p->compute_capability_major = major;
    p->compute_capability_minor = minor;
    if (khz > 0) p->clock_hz = khz * 1e3;
    if (api_.GetDeviceProperties) {
      // cnrtDeviceProp_t begins with char name[256]; the buffer is larger than the struct.
      std::vector<char> buf(4096, 0);
      if (api_.GetDeviceProperties(buf.data(), device) == kSuccess && buf[0]) p->name.assign(buf.data(), strnlen(buf.data(), 256));
    }
    return Status::Ok();
  }

  Status malloc(void** ptr, std::size_t bytes) override { return check(api_.Malloc(ptr, bytes), "cnrtMalloc"); }
  Status free(void* ptr) override { return check(api_.Free(ptr), "cnrtFree"); }
  Status memGetInfo(std::size_t* f, std::size_t* t) override { return check(api_.MemGetInfo(f, t), "cnrtMemGetInfo"); }
  Status hostMalloc(void** ptr, std::size_t bytes) override { return check(api_.HostMalloc(ptr, bytes), "cnrtHostMalloc"); }
  Status hostFree(void* ptr) override { return check(api_.FreeHost(ptr), "cnrtFreeHost"); }
  Status hostRegister(void*, std::size_t) override {
    return Status(Code::NotSupported, "hostRegister: CNRT has no host-memory registration call");
  }
  Status hostUnregister(void*) override {
    return Status(Code::NotSupported, "hostUnregister: CNRT has no host-memory registration call");
  }

  Status memcpy(void* dst, const void* src, std::size_t n, MemcpyKind kind) override {
    return check(api_.Memcpy(dst, const_cast<void*>(src), n, direction(kind)), "cnrtMemcpy");
  }
  Status memcpyAsync(void* dst, const void* src, std::size_t n, MemcpyKind kind, VendorQueue q) override {
    return check(api_.MemcpyAsync(dst, const_cast<void*>(src), n, q, direction(kind)), "cnrtMemcpyAsync");
  }
  Status memcpyPeerAsync(void* dst, int dd, const void* src, int sd, std::size_t n, VendorQueue q) override {
    return check(api_.MemcpyPeerAsync(dst, dd, const_cast<void*>(src), sd, n, q), "cnrtMemcpyPeerAsync");
  }
  Status memset(void* ptr, int value, std::size_t n) override { return check(api_.Memset(ptr, value, n), "cnrtMemset"); }
  Status memsetAsync(void* ptr, int value, std::size_t n, VendorQueue q) override {
    return check(api_.MemsetAsync(ptr, value, n, q), "cnrtMemsetAsync");
  }

  Status queueCreate(VendorQueue* q, int priority) override {
    return check(api_.QueueCreateWithPriority(q, 0, priority), "cnrtQueueCreateWithPriority");
  }
  Status queueDestroy(VendorQueue q) override { return check(api_.QueueDestroy(q), "cnrtQueueDestroy"); }
  Status queueSynchronize(VendorQueue q) override { return check(api_.QueueSync(q), "cnrtQueueSync"); }
  Status queueQuery(VendorQueue q) override { return check(api_.QueueQuery(q), "cnrtQueueQuery"); }
  Status queuePriority(VendorQueue q, int* p) override { return check(api_.QueueGetPriority(q, p), "cnrtQueueGetPriority"); }
  Status priorityRange(int* least, int* greatest) override {
    return check(api_.DeviceGetQueuePriorityRange(least, greatest), "cnrtDeviceGetQueuePriorityRange");
  }
  Status queueWaitNotifier(VendorQueue q, VendorNotifier n) override {
    return check(api_.QueueWaitNotifier(n, q, 0), "cnrtQueueWaitNotifier");
  }

  Status notifierCreate(VendorNotifier* n, unsigned flags) override {
    unsigned f = 0;
    if (flags & kEventDisableTiming) f |= kNotifierDisableTimingAll;
    if (flags & kEventInterprocess) f |= kNotifierInterprocess;
    return check(api_.NotifierCreateWithFlags(n, f), "cnrtNotifierCreateWithFlags");
  }
  Status notifierDestroy(VendorNotifier n) override { return check(api_.NotifierDestroy(n), "cnrtNotifierDestroy"); }
  Status notifierRecord(VendorNotifier n, VendorQueue q) override { return check(api_.PlaceNotifier(n, q), "cnrtPlaceNotifier"); }
  Status notifierQuery(VendorNotifier n) override { return check(api_.QueryNotifier(n), "cnrtQueryNotifier"); }
  Status notifierSynchronize(VendorNotifier n) override { return check(api_.WaitNotifier(n), "cnrtWaitNotifier"); }
  Status notifierElapsedMs(float* ms, VendorNotifier a, VendorNotifier b) override {
    return check(api_.NotifierElapsedTime(a, b, ms), "cnrtNotifierElapsedTime");
  }

 private:
  static int direction(MemcpyKind k) {
    switch (k) {
      case MemcpyKind::HostToDevice: return kHostToDev;
      case MemcpyKind::DeviceToHost: return kDevToHost;
      case MemcpyKind::DeviceToDevice: return kDevToDev;
      case MemcpyKind::HostToHost: return kHostToHost;
      case MemcpyKind::Default: return kNoDirection;
    }
    return kNoDirection;
  }

  static Code classify(cnrtRet r) {
    switch (r) {
      case 100100: case 100010: return Code::OutOfMemory;            // NoMem, SysNoMem
      case 100004: case 100005: case 632006: return Code::InvalidDevice;
      case 100006: case 632013: return Code::InvalidValue;           // ArgsInvalid, MemcpyDirectionInvalid
      case 100014: return Code::InvalidHandle;
      case 100050: case 100051: return Code::NotSupported;
      case 100002: case 632019: return Code::InitFailed;
      case 100128: case 100132: case 100133: return Code::KernelFailed;
      default: break;
    }
    if (r >= 100360 && r <= 100366) return Code::NotSupported;       // queue capture errors
    return Code::Internal;
  }

  Status check(cnrtRet r, const char* call) const {
    if (r == kSuccess) return Status::Ok();
    if (r == kNotReady || r == kBusy) return Status(Code::NotReady, std::string(call) + ": not ready");
    const char* name = api_.GetErrorName ? api_.GetErrorName(r) : nullptr;
    const char* msg = api_.GetErrorStr ? api_.GetErrorStr(r) : nullptr;
    return vendorError(classify(r), call, name ? name : "cnrtRet_t", r, msg);
  }

  DynamicLibrary lib_;
  Api api_{};
  std::string version_;
};

}  // namespace

std::unique_ptr<IVendorRuntime> openCnrt(Status* why) {
  const char* home = std::getenv("NEUWARE_HOME");
  const std::string path = std::string(home && *home ? home : "/usr/local/neuware") + "/lib64/libcnrt.so";
  auto rt = std::make_unique<CnrtRuntime>();
  if (Status st = rt->open(path); !st.ok()) {
    *why = Status(Code::InitFailed, "native backend: " + st.message() + " (NEUWARE_HOME selects the installation)");
    return nullptr;
  }
  return rt;
}

}  // namespace cardsim::shim::native
