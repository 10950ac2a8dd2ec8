// Biren's SUPA runtime (libsupa.so) behind IVendorRuntime. supa_runtime.h is not public;
// torch_supa calls it as a CUDA-shaped API (supaMalloc, supaMemcpyAsync(dst, src, n, kind,
// stream), supaStreamWaitEvent(stream, event, 0), supaEventElapsedTime(&ms, start, end)),
// so the prototypes are CUDA's, and so are the enum values this file needs (memcpy kinds,
// event flags). Errors are recognised by name when the runtime has supaGetErrorName, else
// by CUDA's number for "not ready" (600).
#include <cstdlib>
#include <cstring>
#include <string>

#include "native/DynamicLibrary.h"
#include "native/VendorRuntime.h"

namespace cardsim::shim::native {
namespace {

using supaError = int;
using Stream = void*;
using Event = void*;

constexpr supaError kSuccess = 0;
constexpr supaError kNotReadyNumber = 600;
// supaMemcpyKind
constexpr int kHostToHost = 0, kHostToDevice = 1, kDeviceToHost = 2, kDeviceToDevice = 3, kDefault = 4;
// supaEventCreateWithFlags
constexpr unsigned kBlockingSync = 0x1, kDisableTiming = 0x2, kInterprocess = 0x4;

struct Api {
  supaError (*GetDeviceCount)(int*);
  supaError (*GetDevice)(int*);
  supaError (*SetDevice)(int);
  supaError (*DeviceSynchronize)();
  supaError (*DeviceCanAccessPeer)(int*, int, int);
  const char* (*GetErrorString)(supaError);
  const char* (*GetErrorName)(supaError);   // optional
  supaError (*DriverGetVersion)(int*);      // optional
  supaError (*Malloc)(void**, size_t);
  supaError (*Free)(void*);
  supaError (*MemGetInfo)(size_t*, size_t*);
  supaError (*MallocHost)(void**, size_t);
  supaError (*FreeHost)(void*);
  supaError (*HostRegister)(void*, size_t, unsigned);   // optional
  supaError (*HostUnregister)(void*);                   // optional
  supaError (*Memcpy)(void*, const void*, size_t, int);
  supaError (*MemcpyAsync)(void*, const void*, size_t, int, Stream);
  supaError (*MemcpyPeerAsync)(void*, int, const void*, int, size_t, Stream);
  supaError (*Memset)(void*, int, size_t);
  supaError (*MemsetAsync)(void*, int, size_t, Stream);
  supaError (*StreamCreateWithPriority)(Stream*, unsigned, int);
  supaError (*StreamDestroy)(Stream);
  supaError (*StreamSynchronize)(Stream);
  supaError (*StreamQuery)(Stream);
  supaError (*StreamGetPriority)(Stream, int*);
  supaError (*DeviceGetStreamPriorityRange)(int*, int*);
  supaError (*StreamWaitEvent)(Stream, Event, unsigned);
  supaError (*EventCreateWithFlags)(Event*, unsigned);
  supaError (*EventDestroy)(Event);
  supaError (*EventRecord)(Event, Stream);
  supaError (*EventQuery)(Event);
  supaError (*EventSynchronize)(Event);
  supaError (*EventElapsedTime)(float*, Event, Event);
};

class SupaRuntime final : public IVendorRuntime {
 public:
  Status open(const std::string& path) {
    if (Status st = lib_.open(path); !st.ok()) return st;
    lib_.bind("supaGetDeviceCount", api_.GetDeviceCount);
    lib_.bind("supaGetDevice", api_.GetDevice);
    lib_.bind("supaSetDevice", api_.SetDevice);
    lib_.bind("supaDeviceSynchronize", api_.DeviceSynchronize);
    lib_.bind("supaDeviceCanAccessPeer", api_.DeviceCanAccessPeer);
    lib_.bind("supaGetErrorString", api_.GetErrorString);
    lib_.bindOptional("supaGetErrorName", api_.GetErrorName);
    lib_.bindOptional("supaDriverGetVersion", api_.DriverGetVersion);
    lib_.bind("supaMalloc", api_.Malloc);
    lib_.bind("supaFree", api_.Free);
    lib_.bind("supaMemGetInfo", api_.MemGetInfo);
    lib_.bind("supaMallocHost", api_.MallocHost);
    lib_.bind("supaFreeHost", api_.FreeHost);
    lib_.bindOptional("supaHostRegister", api_.HostRegister);
    lib_.bindOptional("supaHostUnregister", api_.HostUnregister);
    lib_.bind("supaMemcpy", api_.Memcpy);
    lib_.bind("supaMemcpyAsync", api_.MemcpyAsync);
    lib_.bind("supaMemcpyPeerAsync", api_.MemcpyPeerAsync);
    lib_.bind("supaMemset", api_.Memset);
    lib_.bind("supaMemsetAsync", api_.MemsetAsync);
    lib_.bind("supaStreamCreateWithPriority", api_.StreamCreateWithPriority);
    lib_.bind("supaStreamDestroy", api_.StreamDestroy);
    lib_.bind("supaStreamSynchronize", api_.StreamSynchronize);
    lib_.bind("supaStreamQuery", api_.StreamQuery);
    lib_.bind("supaStreamGetPriority", api_.StreamGetPriority);
    lib_.bind("supaDeviceGetStreamPriorityRange", api_.DeviceGetStreamPriorityRange);
    lib_.bind("supaStreamWaitEvent", api_.StreamWaitEvent);
    lib_.bind("supaEventCreateWithFlags", api_.EventCreateWithFlags);
    lib_.bind("supaEventDestroy", api_.EventDestroy);
    lib_.bind("supaEventRecord", api_.EventRecord);
    lib_.bind("supaEventQuery", api_.EventQuery);
    lib_.bind("supaEventSynchronize", api_.EventSynchronize);
    lib_.bind("supaEventElapsedTime", api_.EventElapsedTime);
    if (Status st = lib_.complete(); !st.ok()) return st;
    int v = 0;
    if (api_.DriverGetVersion && api_.DriverGetVersion(&v) == kSuccess)
      version_ = std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
    return Status::Ok();
  }

  const char* runtimeName() const override { return "SUPA runtime"; }
  std::string libraryPath() const override { return lib_.path(); }
  std::string version() const override { return version_; }

  Status deviceCount(int* count) override { return check(api_.GetDeviceCount(count), "supaGetDeviceCount"); }
  Status setDevice(int d) override { return check(api_.SetDevice(d), "supaSetDevice"); }
  Status getDevice(int* d) override { return check(api_.GetDevice(d), "supaGetDevice"); }
  Status synchronizeDevice() override { return check(api_.DeviceSynchronize(), "supaDeviceSynchronize"); }
  Status canAccessPeer(int* can, int device, int peer) override {
    return check(api_.DeviceCanAccessPeer(can, device, peer), "supaDeviceCanAccessPeer");
  }
  Status deviceProperties(DeviceProperties* p, int device) override {
    // Without a public properties struct, the memory size is what the runtime reports for
    // the device (asked on it, the caller's device restored).
    int current = 0;
    if (Status st = getDevice(&current); !st.ok()) return st;
    if (Status st = setDevice(device); !st.ok()) return st;
    std::size_t free_b = 0, total_b = 0;
    Status st = check(api_.MemGetInfo(&free_b, &total_b), "supaMemGetInfo");
    Status back = setDevice(current);
    if (!st.ok()) return st;
    if (!back.ok()) return back;
    p->total_memory_bytes = total_b;
    return Status::Ok();
  }

  Status malloc(void** ptr, std::size_t n) override { return check(api_.Malloc(ptr, n), "supaMalloc"); }
  Status free(void* ptr) override { return check(api_.Free(ptr), "supaFree"); }
  Status memGetInfo(std::size_t* f, std::size_t* t) override { return check(api_.MemGetInfo(f, t), "supaMemGetInfo"); }
  Status hostMalloc(void** ptr, std::size_t n) override { return check(api_.MallocHost(ptr, n), "supaMallocHost"); }
  Status hostFree(void* ptr) override { return check(api_.FreeHost(ptr), "supaFreeHost"); }
  Status hostRegister(void* ptr, std::size_t n) override {
    if (!api_.HostRegister) return Status(Code::NotSupported, "hostRegister: " + lib_.path() + " has no supaHostRegister");
    return check(api_.HostRegister(ptr, n, 0), "supaHostRegister");
  }
  Status hostUnregister(void* ptr) override {
    if (!api_.HostUnregister) return Status(Code::NotSupported, "hostUnregister: " + lib_.path() + " has no supaHostUnregister");
    return check(api_.HostUnregister(ptr), "supaHostUnregister");
  }

  Status memcpy(void* dst, const void* src, std::size_t n, MemcpyKind kind) override {
    return check(api_.Memcpy(dst, src, n, kindOf(kind)), "supaMemcpy");
  }
  Status memcpyAsync(void* dst, const void* src, std::size_t n, MemcpyKind kind, VendorQueue q) override {
    return check(api_.MemcpyAsync(dst, src, n, kindOf(kind), q), "supaMemcpyAsync");
  }
  Status memcpyPeerAsync(void* dst, int dd, const void* src, int sd, std::size_t n, VendorQueue q) override {
    return check(api_.MemcpyPeerAsync(dst, dd, src, sd, n, q), "supaMemcpyPeerAsync");
  }
  Status memset(void* ptr, int value, std::size_t n) override { return check(api_.Memset(ptr, value, n), "supaMemset"); }
  Status memsetAsync(void* ptr, int value, std::size_t n, VendorQueue q) override {
    return check(api_.MemsetAsync(ptr, value, n, q), "supaMemsetAsync");
  }

  Status queueCreate(VendorQueue* q, int priority) override {
    return check(api_.StreamCreateWithPriority(q, 0, priority), "supaStreamCreateWithPriority");
  }
  Status queueDestroy(VendorQueue q) override { return check(api_.StreamDestroy(q), "supaStreamDestroy"); }
  Status queueSynchronize(VendorQueue q) override { return check(api_.StreamSynchronize(q), "supaStreamSynchronize"); }
  Status queueQuery(VendorQueue q) override { return check(api_.StreamQuery(q), "supaStreamQuery"); }
  Status queuePriority(VendorQueue q, int* p) override { return check(api_.StreamGetPriority(q, p), "supaStreamGetPriority"); }
  Status priorityRange(int* least, int* greatest) override {
    return check(api_.DeviceGetStreamPriorityRange(least, greatest), "supaDeviceGetStreamPriorityRange");
  }
  Status queueWaitNotifier(VendorQueue q, VendorNotifier n) override {
    return check(api_.StreamWaitEvent(q, n, 0), "supaStreamWaitEvent");
  }

  Status notifierCreate(VendorNotifier* n, unsigned flags) override {
    unsigned f = 0;
    if (flags & kEventDisableTiming) f |= kDisableTiming;
    if (flags & kEventBlockingSync) f |= kBlockingSync;
    if (flags & kEventInterprocess) f |= kInterprocess;
    return check(api_.EventCreateWithFlags(n, f), "supaEventCreateWithFlags");
  }
  Status notifierDestroy(VendorNotifier n) override { return check(api_.EventDestroy(n), "supaEventDestroy"); }
  Status notifierRecord(VendorNotifier n, VendorQueue q) override { return check(api_.EventRecord(n, q), "supaEventRecord"); }
  Status notifierQuery(VendorNotifier n) override { return check(api_.EventQuery(n), "supaEventQuery"); }
  Status notifierSynchronize(VendorNotifier n) override { return check(api_.EventSynchronize(n), "supaEventSynchronize"); }
  Status notifierElapsedMs(float* ms, VendorNotifier a, VendorNotifier b) override {
    return check(api_.EventElapsedTime(ms, a, b), "supaEventElapsedTime");
  }

 private:
  static int kindOf(MemcpyKind k) {
    switch (k) {
      case MemcpyKind::HostToDevice: return kHostToDevice;
      case MemcpyKind::DeviceToHost: return kDeviceToHost;
      case MemcpyKind::DeviceToDevice: return kDeviceToDevice;
      case MemcpyKind::HostToHost: return kHostToHost;
      case MemcpyKind::Default: return kDefault;
    }
    return kDefault;
  }

  static Code classify(const std::string& name) {
    if (name == "supaErrorMemoryAllocation") return Code::OutOfMemory;
    if (name == "supaErrorInvalidValue") return Code::InvalidValue;
    if (name == "supaErrorInvalidDevice" || name == "supaErrorNoDevice") return Code::InvalidDevice;
    if (name == "supaErrorInvalidResourceHandle") return Code::InvalidHandle;
    if (name == "supaErrorNotSupported") return Code::NotSupported;
    if (name == "supaErrorInsufficientDriver" || name == "supaErrorInitializationError") return Code::InitFailed;
    return Code::Internal;
  }

  Status check(supaError r, const char* call) const {
    if (r == kSuccess) return Status::Ok();
    const char* n = api_.GetErrorName ? api_.GetErrorName(r) : nullptr;
    const std::string name = n ? n : "";
    if (name == "supaErrorNotReady" || (name.empty() && r == kNotReadyNumber))
      return Status(Code::NotReady, std::string(call) + ": not ready");
    const char* msg = api_.GetErrorString ? api_.GetErrorString(r) : nullptr;
    return vendorError(classify(name), call, name.empty() ? "supaError_t" : name.c_str(), r, msg);
  }

  DynamicLibrary lib_;
  Api api_{};
  std::string version_;
};

}  // namespace

std::unique_ptr<IVendorRuntime> openSupaRuntime(Status* why) {
  const char* home = std::getenv("BIREN_HOME");
  const std::string path = std::string(home && *home ? home : "/usr/local/birensupa/sdk/latest") + "/brumd/libsupa.so";
  auto rt = std::make_unique<SupaRuntime>();
  if (Status st = rt->open(path); !st.ok()) {
    *why = Status(Code::InitFailed, "native backend: " + st.message() + " (BIREN_HOME selects the installation)");
    return nullptr;
  }
  return rt;
}

}  // namespace cardsim::shim::native
