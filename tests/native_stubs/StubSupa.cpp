// A stand-in libsupa.so for testing cardsim's native backend without a card: the SUPA
// runtime's CUDA-shaped symbol names and argument orders, device memory backed by host
// memory, copies done at once, every call logged and its handles checked.
#include "StubDevices.h"

#define API STUB_API

namespace {
constexpr int kSuccess = 0, kInvalidValue = 1, kMemoryAllocation = 2, kInvalidDevice = 101,
              kInvalidHandle = 400, kNotReady = 600;
using S_ = void*;
using E_ = void*;

#define BEGIN STUB_BEGIN_LOCKED
}  // namespace

STUB_CONTROL_FUNCTIONS
STUB_QUEUE_CHECK

API const char* supaGetErrorString(int r) {
  switch (r) {
    case kSuccess: return "no error";
    case kMemoryAllocation: return "out of memory";
    case kNotReady: return "device not ready";
    default: return "stub error";
  }
}
API const char* supaGetErrorName(int r) {
  switch (r) {
    case kSuccess: return "supaSuccess";
    case kInvalidValue: return "supaErrorInvalidValue";
    case kMemoryAllocation: return "supaErrorMemoryAllocation";
    case kInvalidDevice: return "supaErrorInvalidDevice";
    case kInvalidHandle: return "supaErrorInvalidResourceHandle";
    case kNotReady: return "supaErrorNotReady";
    default: return "supaErrorUnknown";
  }
}
API int supaDriverGetVersion(int* v) { *v = 2040; return kSuccess; }

API int supaGetDeviceCount(int* n) { BEGIN("supaGetDeviceCount", ""); *n = S.devices; return kSuccess; }
API int supaGetDevice(int* d) { BEGIN("supaGetDevice", ""); *d = S.current; return kSuccess; }
API int supaSetDevice(int d) {
  BEGIN("supaSetDevice", std::to_string(d));
  if (d < 0 || d >= S.devices) return kInvalidDevice;
  S.current = d;
  return kSuccess;
}
API int supaDeviceSynchronize() { BEGIN("supaDeviceSynchronize", ""); return kSuccess; }
API int supaDeviceCanAccessPeer(int* can, int d, int p) {
  BEGIN("supaDeviceCanAccessPeer", std::to_string(d) + "," + std::to_string(p));
  if (d < 0 || d >= S.devices || p < 0 || p >= S.devices) return kInvalidDevice;
  *can = d != p;
  return kSuccess;
}

API int supaMalloc(void** p, size_t n) {
  BEGIN("supaMalloc", std::to_string(n));
  if (S.used(S.current) + n > S.total_bytes) return kMemoryAllocation;
  *p = std::aligned_alloc(512, (n + 511) / 512 * 512);
  S.device_allocs[*p] = {n, S.current};
  return kSuccess;
}
API int supaFree(void* p) {
  BEGIN("supaFree", stub::hexPtr(p));
  if (!S.device_allocs.erase(p)) return kInvalidValue;
  std::free(p);
  return kSuccess;
}
API int supaMemGetInfo(size_t* f, size_t* t) {
  BEGIN("supaMemGetInfo", "");
  *t = S.total_bytes;
  *f = S.total_bytes - S.used(S.current);
  return kSuccess;
}
API int supaMallocHost(void** p, size_t n) {
  BEGIN("supaMallocHost", std::to_string(n));
  *p = n ? std::malloc(n) : nullptr;
  if (*p) S.host_allocs.insert(*p);
  return kSuccess;
}
API int supaFreeHost(void* p) {
  BEGIN("supaFreeHost", stub::hexPtr(p));
  if (!S.host_allocs.erase(p)) return kInvalidValue;
  std::free(p);
  return kSuccess;
}
API int supaHostRegister(void* p, size_t n, unsigned flags) {
  BEGIN("supaHostRegister", std::to_string(n) + "," + std::to_string(flags));
  return p && n ? kSuccess : kInvalidValue;
}
API int supaHostUnregister(void* p) { BEGIN("supaHostUnregister", stub::hexPtr(p)); return p ? kSuccess : kInvalidValue; }

namespace {
int copy(stub::State& S, void* dst, const void* src, size_t n, int kind) {
  if (kind < 0 || kind > 4) return kInvalidValue;
  const bool want_src_dev = kind == 2 || kind == 3, want_dst_dev = kind == 1 || kind == 3;
  if (kind != 4 && (want_src_dev != S.isDevice(src) || want_dst_dev != S.isDevice(dst))) return kInvalidValue;
  std::memmove(dst, src, n);
  return kSuccess;
}
}  // namespace

API int supaMemcpy(void* dst, const void* src, size_t n, int kind) {
  BEGIN("supaMemcpy", std::to_string(n) + ",kind=" + std::to_string(kind));
  return copy(S, dst, src, n, kind);
}
API int supaMemcpyAsync(void* dst, const void* src, size_t n, int kind, S_ s) {
  BEGIN("supaMemcpyAsync", std::to_string(n) + ",kind=" + std::to_string(kind) + ",stream=" + stub::hexPtr(s));
  if (!S.validQueue(s)) return kInvalidHandle;   // the stream comes last
  return copy(S, dst, src, n, kind);
}
API int supaMemcpyPeerAsync(void* dst, int dd, const void* src, int sd, size_t n, S_ s) {
  BEGIN("supaMemcpyPeerAsync", std::to_string(dd) + "," + std::to_string(sd) + "," + std::to_string(n));
  if (!S.validQueue(s) || dd < 0 || dd >= S.devices || sd < 0 || sd >= S.devices) return kInvalidValue;
  std::memmove(dst, src, n);
  return kSuccess;
}
API int supaMemset(void* p, int v, size_t n) {
  BEGIN("supaMemset", std::to_string(v) + "," + std::to_string(n));
  if (!S.isDevice(p)) return kInvalidValue;
  std::memset(p, v, n);
  return kSuccess;
}
API int supaMemsetAsync(void* p, int v, size_t n, S_ s) {
  BEGIN("supaMemsetAsync", std::to_string(v) + "," + std::to_string(n));
  if (!S.validQueue(s) || !S.isDevice(p)) return kInvalidValue;
  std::memset(p, v, n);
  return kSuccess;
}

API int supaStreamCreateWithPriority(S_* s, unsigned flags, int prio) {
  BEGIN("supaStreamCreateWithPriority", std::to_string(flags) + "," + std::to_string(prio));
  if (prio > 0 || prio < -3) return kInvalidValue;
  auto* x = new stub::Queue{S.current, prio};
  S.queues.insert(x);
  *s = x;
  return kSuccess;
}
API int supaStreamDestroy(S_ s) {
  BEGIN("supaStreamDestroy", stub::hexPtr(s));
  if (!s || !S.queues.erase(static_cast<stub::Queue*>(s))) return kInvalidHandle;
  delete static_cast<stub::Queue*>(s);
  return kSuccess;
}
API int supaStreamSynchronize(S_ s) { BEGIN("supaStreamSynchronize", stub::hexPtr(s)); return S.validQueue(s) ? kSuccess : kInvalidHandle; }
API int supaStreamQuery(S_ s) { BEGIN("supaStreamQuery", stub::hexPtr(s)); return S.validQueue(s) ? kSuccess : kInvalidHandle; }
API int supaStreamGetPriority(S_ s, int* p) {
  BEGIN("supaStreamGetPriority", stub::hexPtr(s));
  if (!S.validQueue(s)) return kInvalidHandle;
  *p = s ? static_cast<stub::Queue*>(s)->priority : 0;
  return kSuccess;
}
API int supaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  BEGIN("supaDeviceGetStreamPriorityRange", "");
  *least = 0;
  *greatest = -3;
  return kSuccess;
}
API int supaStreamWaitEvent(S_ s, E_ e, unsigned flags) {
  BEGIN("supaStreamWaitEvent", stub::hexPtr(s) + "," + stub::hexPtr(e) + "," + std::to_string(flags));
  if (!S.validQueue(s) || !S.validNotifier(e) || flags != 0) return kInvalidHandle;   // stream first
  return kSuccess;
}
API int supaEventCreateWithFlags(E_* e, unsigned flags) {
  BEGIN("supaEventCreateWithFlags", std::to_string(flags));
  if (flags & ~0x7u) return kInvalidValue;
  auto* x = new stub::Notifier{flags};
  S.notifiers.insert(x);
  *e = x;
  return kSuccess;
}
API int supaEventDestroy(E_ e) {
  BEGIN("supaEventDestroy", stub::hexPtr(e));
  if (!S.notifiers.erase(static_cast<stub::Notifier*>(e))) return kInvalidHandle;
  delete static_cast<stub::Notifier*>(e);
  return kSuccess;
}
API int supaEventRecord(E_ e, S_ s) {
  BEGIN("supaEventRecord", stub::hexPtr(e) + "," + stub::hexPtr(s));
  if (!S.validNotifier(e) || !S.validQueue(s)) return kInvalidHandle;
  auto* x = static_cast<stub::Notifier*>(e);
  x->placed = true;
  x->t_ms = stub::State::nowMs();
  return kSuccess;
}
API int supaEventQuery(E_ e) { BEGIN("supaEventQuery", stub::hexPtr(e)); return S.validNotifier(e) ? kSuccess : kInvalidHandle; }
API int supaEventSynchronize(E_ e) { BEGIN("supaEventSynchronize", stub::hexPtr(e)); return S.validNotifier(e) ? kSuccess : kInvalidHandle; }
API int supaEventElapsedTime(float* ms, E_ a, E_ b) {
  BEGIN("supaEventElapsedTime", stub::hexPtr(a) + "," + stub::hexPtr(b));
  if (!ms || !S.validNotifier(a) || !S.validNotifier(b)) return kInvalidValue;   // output first
  auto *x = static_cast<stub::Notifier*>(a), *y = static_cast<stub::Notifier*>(b);
  if (!x->placed || !y->placed || (x->flags & 0x2) || (y->flags & 0x2)) return kInvalidValue;
  *ms = float(y->t_ms - x->t_ms);
  return kSuccess;
}
