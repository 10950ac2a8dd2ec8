// A stand-in libcncl.so: CNCL 1.x's symbols and argument orders over StubComm.h's in-process
// cliques (the ranks are threads). Each call is logged; a queue that the stub libcnrt.so did
// not hand out, an unknown data type or reduce op, or a communicator that is not one fails
// with CNCL_RET_ERR_ARGUMENTS, as swapped arguments would.
#include <atomic>
#include <cstdint>

#include "StubComm.h"
#include "StubDevices.h"

#define API STUB_API

extern "C" int cardsimStubValidQueue(void* q);   // from the stub libcnrt.so

namespace {
constexpr int kSuccess = 0, kArguments = 0x07, kSystem = 0x02;
struct CliqueId {
  char data[128];
  uint64_t hash;
};
stubcomm::Comms g_comms;

stubcomm::Elem elem(int dt) {
  switch (dt) {
    case 0x12: return stubcomm::F32;
    case 0x22: return stubcomm::I32;
    case 0x23: return stubcomm::I64;
    case 0x20: return stubcomm::I8;
    case 0x30: return stubcomm::U8;
    default: return stubcomm::Unsupported;
  }
}

#define BEGIN STUB_BEGIN

int run(void* comm, void* queue, const stubcomm::Call& call) {
  return stubcomm::run(g_comms, stub::State::get().mutex, comm, cardsimStubValidQueue(queue), call, kArguments, kSystem);
}
}  // namespace

STUB_CONTROL_FUNCTIONS

API const char* cnclGetErrorStr(int r) {
  return r == kArguments ? "invalid arguments" : r == kSystem ? "ranks disagree" : "stub error";
}
API int cnclGetCliqueId(CliqueId* id) {
  BEGIN("cnclGetCliqueId", "");
  static std::atomic<int> n{0};
  std::memset(id, 0, sizeof *id);
  std::snprintf(id->data, sizeof id->data, "stub-clique-%d", ++n);
  id->hash = 0x5eed;
  return kSuccess;
}
API int cnclInitComms(void** comms, int num, const int* devs, const int* ranks, int nrank, const CliqueId* id) {
  BEGIN("cnclInitComms", std::to_string(num) + ",dev=" + std::to_string(devs[0]) + ",rank=" +
                             std::to_string(ranks[0]) + "," + std::to_string(nrank));
  if (num != 1 || !id || id->hash != 0x5eed) return kArguments;
  stubcomm::Comm* c = stubcomm::join(std::string(id->data), nrank, ranks[0]);
  if (!c) return kArguments;
  std::lock_guard<std::mutex> lock(S.mutex);
  g_comms.insert(c);
  comms[0] = c;
  return kSuccess;
}
API int cnclDestroyComms(void** comms, int num) {
  BEGIN("cnclDestroyComms", std::to_string(num));
  std::lock_guard<std::mutex> lock(S.mutex);
  if (num != 1 || !g_comms.erase(static_cast<stubcomm::Comm*>(comms[0]))) return kArguments;
  delete static_cast<stubcomm::Comm*>(comms[0]);
  return kSuccess;
}
API int cnclAllReduce(const void* s, void* r, size_t n, int dt, int op, void* comm, void* q) {
  BEGIN("cnclAllReduce", std::to_string(n) + ",dt=" + std::to_string(dt) + ",op=" + std::to_string(op));
  return run(comm, q, {stubcomm::AllReduce, s, r, n, elem(dt), stubcomm::Red(op), 0});
}
API int cnclBroadcast(const void* s, void* r, size_t n, int dt, int root, void* comm, void* q) {
  BEGIN("cnclBroadcast", std::to_string(n) + ",dt=" + std::to_string(dt) + ",root=" + std::to_string(root));
  return run(comm, q, {stubcomm::Broadcast, s, r, n, elem(dt), stubcomm::Sum, root});
}
API int cnclReduce(const void* s, void* r, size_t n, int dt, int op, int root, void* comm, void* q) {
  BEGIN("cnclReduce", std::to_string(n) + ",op=" + std::to_string(op) + ",root=" + std::to_string(root));
  return run(comm, q, {stubcomm::Reduce, s, r, n, elem(dt), stubcomm::Red(op), root});
}
API int cnclAllGather(const void* s, void* r, size_t n, int dt, void* comm, void* q) {
  BEGIN("cnclAllGather", std::to_string(n) + ",dt=" + std::to_string(dt));
  return run(comm, q, {stubcomm::AllGather, s, r, n, elem(dt), stubcomm::Sum, 0});
}
API int cnclReduceScatter(const void* s, void* r, size_t n, int dt, int op, void* comm, void* q) {
  BEGIN("cnclReduceScatter", std::to_string(n) + ",dt=" + std::to_string(dt) + ",op=" + std::to_string(op));
  return run(comm, q, {stubcomm::ReduceScatter, s, r, n, elem(dt), stubcomm::Red(op), 0});
}
API int cnclSend(void* buf, size_t n, int dt, int peer, void* comm, void* q) {
  BEGIN("cnclSend", std::to_string(n) + ",peer=" + std::to_string(peer));
  if (!cardsimStubValidQueue(q) || elem(dt) == stubcomm::Unsupported) return kArguments;
  stubcomm::send(static_cast<stubcomm::Comm*>(comm), peer, buf, n * stubcomm::elemSize(elem(dt)));
  return kSuccess;
}
API int cnclRecv(void* buf, size_t n, int dt, int peer, void* comm, void* q) {
  BEGIN("cnclRecv", std::to_string(n) + ",peer=" + std::to_string(peer));
  if (!cardsimStubValidQueue(q) || elem(dt) == stubcomm::Unsupported) return kArguments;
  return stubcomm::recv(static_cast<stubcomm::Comm*>(comm), peer, buf, n * stubcomm::elemSize(elem(dt))) ? kSuccess : kSystem;
}
API int cnclGroupStart() { BEGIN("cnclGroupStart", ""); return kSuccess; }
API int cnclGroupEnd() { BEGIN("cnclGroupEnd", ""); return kSuccess; }
