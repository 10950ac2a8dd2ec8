// A stand-in libcnrt.so for testing cardsim's native backend without a card: CNRT's symbol
// names and argument orders (CNRT 6.x cnrt.h), device memory backed by host memory, copies
// done at once, every call logged with its arguments and checked: a queue where the
// direction belongs (or the reverse) fails with cnrtErrorArgsInvalid, as would a notifier
// and a queue swapped. Built without STUB_OMIT_QUEUE_WAIT_NOTIFIER it is complete; with
// it, cnrtQueueWaitNotifier is missing (an incomplete runtime the backend must refuse).
#include "StubDevices.h"

#define API STUB_API

namespace {
constexpr int kSuccess = 0, kArgsInvalid = 100006, kDeviceInvalid = 100005, kNoMem = 100100,
              kInvalidHandle = 100014, kDirectionInvalid = 632013;
using Q = void*;
using N = void*;

#define BEGIN STUB_BEGIN_LOCKED
}  // namespace

STUB_CONTROL_FUNCTIONS
STUB_QUEUE_CHECK

API const char* cnrtGetErrorStr(int r) {
  switch (r) {
    case 0: return "success";
    case 1: return "the resource is not ready";
    case kArgsInvalid: return "invalid argument";
    case kNoMem: return "out of MLU memory";
    case 632014: return "the device or resource is busy";
    default: return "stub error";
  }
}
API const char* cnrtGetErrorName(int r) {
  switch (r) {
    case 0: return "cnrtSuccess";
    case 1: return "cnrtErrorNotReady";
    case kArgsInvalid: return "cnrtErrorArgsInvalid";
    case kDeviceInvalid: return "cnrtErrorDeviceInvalid";
    case kNoMem: return "cnrtErrorNoMem";
    case kInvalidHandle: return "cnrtErrorInvalidResourceHandle";
    case kDirectionInvalid: return "cnrtErrorMemcpyDirectionInvalid";
    case 632014: return "cnrtErrorBusy";
    default: return "cnrtErrorUnknown";
  }
}
API int cnrtGetLibVersion(int* a, int* b, int* c) { *a = 6; *b = 14; *c = 1; return kSuccess; }

API int cnrtGetDeviceCount(unsigned* n) { BEGIN("cnrtGetDeviceCount", ""); *n = unsigned(S.devices); return kSuccess; }
API int cnrtGetDevice(int* d) { BEGIN("cnrtGetDevice", ""); *d = S.current; return kSuccess; }
API int cnrtSetDevice(int d) {
  BEGIN("cnrtSetDevice", std::to_string(d));
  if (d < 0 || d >= S.devices) return kDeviceInvalid;
  S.current = d;
  return kSuccess;
}
API int cnrtSyncDevice() { BEGIN("cnrtSyncDevice", ""); return kSuccess; }
API int cnrtDeviceGetAttribute(int* v, int attr, int dev) {
  BEGIN("cnrtDeviceGetAttribute", std::to_string(attr) + "," + std::to_string(dev));
  if (dev < 0 || dev >= S.devices) return kDeviceInvalid;
  switch (attr) {
    case 0x01: *v = 3; return kSuccess;                      // capability major
    case 0x02: *v = 0; return kSuccess;
    case 0x205: *v = 8; return kSuccess;                     // clusters
    case 0x206: *v = 4; return kSuccess;                     // cores per cluster
    case 0x402: *v = 1300000; return kSuccess;               // kHz
    case 0x405: *v = int(S.total_bytes >> 20); return kSuccess;   // MB
    default: return kArgsInvalid;
  }
}
API int cnrtGetDeviceProperties_V3(void* prop, int dev) {
  BEGIN("cnrtGetDeviceProperties_V3", std::to_string(dev));
  std::strcpy(static_cast<char*>(prop), "MLU370-X8 (stub)");
  return kSuccess;
}
API int cnrtGetPeerAccessibility(unsigned* can, int dev, int peer) {
  BEGIN("cnrtGetPeerAccessibility", std::to_string(dev) + "," + std::to_string(peer));
  if (dev < 0 || dev >= S.devices || peer < 0 || peer >= S.devices) return kDeviceInvalid;
  *can = dev != peer;
  return kSuccess;
}

API int cnrtMalloc(void** p, size_t n) {
  BEGIN("cnrtMalloc", std::to_string(n));
  if (S.used(S.current) + n > S.total_bytes) return kNoMem;
  *p = std::aligned_alloc(512, (n + 511) / 512 * 512);
  S.device_allocs[*p] = {n, S.current};
  return kSuccess;
}
API int cnrtFree(void* p) {
  BEGIN("cnrtFree", stub::hexPtr(p));
  if (!S.device_allocs.erase(p)) return kArgsInvalid;
  std::free(p);
  return kSuccess;
}
API int cnrtMemGetInfo(size_t* f, size_t* t) {
  BEGIN("cnrtMemGetInfo", "");
  *t = S.total_bytes;
  *f = S.total_bytes - S.used(S.current);
  return kSuccess;
}
API int cnrtHostMalloc(void** p, size_t n) {
  BEGIN("cnrtHostMalloc", std::to_string(n));
  *p = n ? std::malloc(n) : nullptr;
  if (*p) S.host_allocs.insert(*p);
  return kSuccess;
}
API int cnrtFreeHost(void* p) {
  BEGIN("cnrtFreeHost", stub::hexPtr(p));
  if (!S.host_allocs.erase(p)) return kArgsInvalid;
  std::free(p);
  return kSuccess;
}

namespace {
int copy(stub::State& S, void* dst, void* src, size_t n, int dir) {
  if (dir < 0 || dir > 5) return kDirectionInvalid;
  const bool want_src_dev = dir == 1 || dir == 2 || dir == 4, want_dst_dev = dir == 0 || dir == 1 || dir == 4;
  if (dir <= 3 && (want_src_dev != S.isDevice(src) || want_dst_dev != S.isDevice(dst))) return kDirectionInvalid;
  std::memmove(dst, src, n);
  return kSuccess;
}
}  // namespace

API int cnrtMemcpy(void* dst, void* src, size_t n, int dir) {
  BEGIN("cnrtMemcpy", std::to_string(n) + ",dir=" + std::to_string(dir));
  return copy(S, dst, src, n, dir);
}
API int cnrtMemcpyAsync(void* dst, void* src, size_t n, Q q, int dir) {
  BEGIN("cnrtMemcpyAsync", std::to_string(n) + ",queue=" + stub::hexPtr(q) + ",dir=" + std::to_string(dir));
  if (!S.validQueue(q)) return kInvalidHandle;   // e.g. the direction passed where the queue belongs
  return copy(S, dst, src, n, dir);
}
API int cnrtMemcpyPeerAsync(void* dst, int dd, void* src, int sd, size_t n, Q q) {
  BEGIN("cnrtMemcpyPeerAsync", std::to_string(dd) + "," + std::to_string(sd) + "," + std::to_string(n));
  if (!S.validQueue(q) || dd < 0 || dd >= S.devices || sd < 0 || sd >= S.devices) return kArgsInvalid;
  std::memmove(dst, src, n);
  return kSuccess;
}
API int cnrtMemset(void* p, int v, size_t n) {
  BEGIN("cnrtMemset", std::to_string(v) + "," + std::to_string(n));
  if (!S.isDevice(p)) return kArgsInvalid;
  std::memset(p, v, n);
  return kSuccess;
}
API int cnrtMemsetAsync(void* p, int v, size_t n, Q q) {
  BEGIN("cnrtMemsetAsync", std::to_string(v) + "," + std::to_string(n));
  if (!S.validQueue(q) || !S.isDevice(p)) return kArgsInvalid;
  std::memset(p, v, n);
  return kSuccess;
}

API int cnrtQueueCreateWithPriority(Q* q, unsigned flags, int prio) {
  BEGIN("cnrtQueueCreateWithPriority", std::to_string(flags) + "," + std::to_string(prio));
  if (flags != 0 || prio < 0 || prio > 7) return kArgsInvalid;
  auto* x = new stub::Queue{S.current, prio};
  S.queues.insert(x);
  *q = x;
  return kSuccess;
}
API int cnrtQueueDestroy(Q q) {
  BEGIN("cnrtQueueDestroy", stub::hexPtr(q));
  if (!q || !S.queues.erase(static_cast<stub::Queue*>(q))) return kInvalidHandle;
  delete static_cast<stub::Queue*>(q);
  return kSuccess;
}
API int cnrtQueueSync(Q q) { BEGIN("cnrtQueueSync", stub::hexPtr(q)); return S.validQueue(q) ? kSuccess : kInvalidHandle; }
API int cnrtQueueQuery(Q q) { BEGIN("cnrtQueueQuery", stub::hexPtr(q)); return S.validQueue(q) ? kSuccess : kInvalidHandle; }
API int cnrtQueueGetPriority(Q q, int* p) {
  BEGIN("cnrtQueueGetPriority", stub::hexPtr(q));
  if (!S.validQueue(q)) return kInvalidHandle;
  *p = q ? static_cast<stub::Queue*>(q)->priority : 7;
  return kSuccess;
}
API int cnrtDeviceGetQueuePriorityRange(int* least, int* greatest) {
  BEGIN("cnrtDeviceGetQueuePriorityRange", "");
  *least = 7;
  *greatest = 0;
  return kSuccess;
}
#ifndef STUB_OMIT_QUEUE_WAIT_NOTIFIER
API int cnrtQueueWaitNotifier(N n, Q q, unsigned flag) {
  BEGIN("cnrtQueueWaitNotifier", stub::hexPtr(n) + "," + stub::hexPtr(q) + "," + std::to_string(flag));
  if (!S.validNotifier(n) || !S.validQueue(q) || flag != 0) return kArgsInvalid;   // notifier first
  return kSuccess;
}
#endif

API int cnrtNotifierCreateWithFlags(N* n, unsigned flags) {
  BEGIN("cnrtNotifierCreateWithFlags", std::to_string(flags));
  if (flags & ~0xEu) return kArgsInvalid;
  if ((flags & 0x8) && !(flags & 0x4)) return kArgsInvalid;   // interprocess needs DISABLE_TIMING_ALL
  auto* x = new stub::Notifier{flags};
  S.notifiers.insert(x);
  *n = x;
  return kSuccess;
}
API int cnrtNotifierDestroy(N n) {
  BEGIN("cnrtNotifierDestroy", stub::hexPtr(n));
  if (!S.notifiers.erase(static_cast<stub::Notifier*>(n))) return kInvalidHandle;
  delete static_cast<stub::Notifier*>(n);
  return kSuccess;
}
API int cnrtPlaceNotifier(N n, Q q) {
  BEGIN("cnrtPlaceNotifier", stub::hexPtr(n) + "," + stub::hexPtr(q));
  if (!S.validNotifier(n) || !S.validQueue(q)) return kArgsInvalid;
  auto* x = static_cast<stub::Notifier*>(n);
  x->placed = true;
  x->t_ms = stub::State::nowMs();
  return kSuccess;
}
API int cnrtQueryNotifier(N n) { BEGIN("cnrtQueryNotifier", stub::hexPtr(n)); return S.validNotifier(n) ? kSuccess : kInvalidHandle; }
API int cnrtWaitNotifier(N n) { BEGIN("cnrtWaitNotifier", stub::hexPtr(n)); return S.validNotifier(n) ? kSuccess : kInvalidHandle; }
API int cnrtNotifierElapsedTime(N a, N b, float* ms) {
  BEGIN("cnrtNotifierElapsedTime", stub::hexPtr(a) + "," + stub::hexPtr(b));
  if (!S.validNotifier(a) || !S.validNotifier(b) || !ms) return kArgsInvalid;   // output last
  auto *x = static_cast<stub::Notifier*>(a), *y = static_cast<stub::Notifier*>(b);
  if (!x->placed || !y->placed || (x->flags & 0x4) || (y->flags & 0x4)) return kArgsInvalid;
  *ms = float(y->t_ms - x->t_ms);
  return kSuccess;
}
