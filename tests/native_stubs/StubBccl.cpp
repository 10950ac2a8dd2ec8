// A stand-in libbccl.so: BCCL's NCCL-shaped symbols (128-byte unique id passed by value,
// NCCL's data-type numbers) over StubComm.h's in-process cliques. Each call is logged; a
// stream that the stub libsupa.so did not hand out, an unknown data type or reduce op, or a
// communicator that is not one fails with bcclInvalidArgument (4).
#include <atomic>

#include "StubComm.h"
#include "StubDevices.h"

#define API STUB_API

extern "C" int cardsimStubValidQueue(void* q);   // from the stub libsupa.so

namespace {
constexpr int kSuccess = 0, kInvalidArgument = 4, kSystem = 2;
struct UniqueId {
  char internal[128];
};
stubcomm::Comms g_comms;

stubcomm::Elem elem(int dt) {
  switch (dt) {
    case 0: return stubcomm::I8;
    case 1: return stubcomm::U8;
    case 2: return stubcomm::I32;
    case 4: return stubcomm::I64;
    case 7: return stubcomm::F32;
    case 8: return stubcomm::F64;
    default: return stubcomm::Unsupported;
  }
}

#define BEGIN STUB_BEGIN

int run(void* comm, void* stream, const stubcomm::Call& call) {
  return stubcomm::run(g_comms, stub::State::get().mutex, comm, cardsimStubValidQueue(stream), call, kInvalidArgument, kSystem);
}
}  // namespace

STUB_CONTROL_FUNCTIONS

API const char* bcclGetErrorString(int r) {
  return r == kInvalidArgument ? "invalid argument" : r == kSystem ? "ranks disagree" : "stub error";
}
API int bcclGetUniqueId(UniqueId* id) {
  BEGIN("bcclGetUniqueId", "");
  static std::atomic<int> n{0};
  std::memset(id, 0, sizeof *id);
  std::snprintf(id->internal, sizeof id->internal, "stub-bccl-%d", ++n);
  return kSuccess;
}
API int bcclCommInitRank(void** comm, int nranks, UniqueId id, int rank) {
  BEGIN("bcclCommInitRank", std::to_string(nranks) + "," + std::string(id.internal) + "," + std::to_string(rank));
  if (std::strncmp(id.internal, "stub-bccl-", 10) != 0 || rank < 0 || rank >= nranks) return kInvalidArgument;
  stubcomm::Comm* c = stubcomm::join(std::string(id.internal), nranks, rank);
  if (!c) return kInvalidArgument;
  std::lock_guard<std::mutex> lock(S.mutex);
  g_comms.insert(c);
  *comm = c;
  return kSuccess;
}
API int bcclCommDestroy(void* comm) {
  BEGIN("bcclCommDestroy", "");
  std::lock_guard<std::mutex> lock(S.mutex);
  if (!g_comms.erase(static_cast<stubcomm::Comm*>(comm))) return kInvalidArgument;
  delete static_cast<stubcomm::Comm*>(comm);
  return kSuccess;
}
API int bcclAllReduce(const void* s, void* r, size_t n, int dt, int op, void* comm, void* st) {
  BEGIN("bcclAllReduce", std::to_string(n) + ",dt=" + std::to_string(dt) + ",op=" + std::to_string(op));
  return run(comm, st, {stubcomm::AllReduce, s, r, n, elem(dt), stubcomm::Red(op), 0});
}
API int bcclBroadcast(const void* s, void* r, size_t n, int dt, int root, void* comm, void* st) {
  BEGIN("bcclBroadcast", std::to_string(n) + ",root=" + std::to_string(root));
  return run(comm, st, {stubcomm::Broadcast, s, r, n, elem(dt), stubcomm::Sum, root});
}
API int bcclReduce(const void* s, void* r, size_t n, int dt, int op, int root, void* comm, void* st) {
  BEGIN("bcclReduce", std::to_string(n) + ",op=" + std::to_string(op) + ",root=" + std::to_string(root));
  return run(comm, st, {stubcomm::Reduce, s, r, n, elem(dt), stubcomm::Red(op), root});
}
API int bcclAllGather(const void* s, void* r, size_t n, int dt, void* comm, void* st) {
  BEGIN("bcclAllGather", std::to_string(n) + ",dt=" + std::to_string(dt));
  return run(comm, st, {stubcomm::AllGather, s, r, n, elem(dt), stubcomm::Sum, 0});
}
API int bcclReduceScatter(const void* s, void* r, size_t n, int dt, int op, void* comm, void* st) {
  BEGIN("bcclReduceScatter", std::to_string(n) + ",dt=" + std::to_string(dt) + ",op=" + std::to_string(op));
  return run(comm, st, {stubcomm::ReduceScatter, s, r, n, elem(dt), stubcomm::Red(op), 0});
}
API int bcclSend(const void* buf, size_t n, int dt, int peer, void* comm, void* st) {
  BEGIN("bcclSend", std::to_string(n) + ",peer=" + std::to_string(peer));
  if (!cardsimStubValidQueue(st) || elem(dt) == stubcomm::Unsupported) return kInvalidArgument;
  stubcomm::send(static_cast<stubcomm::Comm*>(comm), peer, buf, n * stubcomm::elemSize(elem(dt)));
  return kSuccess;
}
API int bcclRecv(void* buf, size_t n, int dt, int peer, void* comm, void* st) {
  BEGIN("bcclRecv", std::to_string(n) + ",peer=" + std::to_string(peer));
  if (!cardsimStubValidQueue(st) || elem(dt) == stubcomm::Unsupported) return kInvalidArgument;
  return stubcomm::recv(static_cast<stubcomm::Comm*>(comm), peer, buf, n * stubcomm::elemSize(elem(dt))) ? kSuccess : kSystem;
}
API int bcclGroupStart() { BEGIN("bcclGroupStart", ""); return kSuccess; }
API int bcclGroupEnd() { BEGIN("bcclGroupEnd", ""); return kSuccess; }
