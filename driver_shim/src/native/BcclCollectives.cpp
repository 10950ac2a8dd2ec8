// Biren's BCCL ($BIREN_HOME/bccl/libbccl.so) behind IVendorCollectives. bccl.h is not
// public; BCCL is NCCL-shaped (bcclCommInitRank(&comm, nranks, id, rank), bcclAllReduce(send,
// recv, count, dtype, op, comm, stream)), so the prototypes, the 128-byte unique id passed
// by value, and the data-type and result numbers are NCCL's.
#include <cstdlib>
#include <cstring>
#include <string>

#include "native/DynamicLibrary.h"
#include "native/VendorRuntime.h"

namespace cardsim::shim::native {
namespace {

using bcclResult = int;
using Comm = void*;
using Stream = void*;
struct UniqueId {
  char internal[128];
};

struct Api {
  bcclResult (*GetUniqueId)(UniqueId*);
  bcclResult (*CommInitRank)(Comm*, int, UniqueId, int);
  bcclResult (*CommDestroy)(Comm);
  bcclResult (*AllReduce)(const void*, void*, size_t, int, int, Comm, Stream);
  bcclResult (*Broadcast)(const void*, void*, size_t, int, int, Comm, Stream);
  bcclResult (*Reduce)(const void*, void*, size_t, int, int, int, Comm, Stream);
  bcclResult (*AllGather)(const void*, void*, size_t, int, Comm, Stream);
  bcclResult (*ReduceScatter)(const void*, void*, size_t, int, int, Comm, Stream);
  bcclResult (*Send)(const void*, size_t, int, int, Comm, Stream);
  bcclResult (*Recv)(void*, size_t, int, int, Comm, Stream);
  bcclResult (*GroupStart)();
  bcclResult (*GroupEnd)();
  const char* (*GetErrorString)(bcclResult);
};

class BcclCollectives final : public IVendorCollectives {
 public:
  Status open(const std::string& path) {
    if (Status st = lib_.open(path); !st.ok()) return st;
    lib_.bind("bcclGetUniqueId", api_.GetUniqueId);
    lib_.bind("bcclCommInitRank", api_.CommInitRank);
    lib_.bind("bcclCommDestroy", api_.CommDestroy);
    lib_.bind("bcclAllReduce", api_.AllReduce);
    lib_.bind("bcclBroadcast", api_.Broadcast);
    lib_.bind("bcclReduce", api_.Reduce);
    lib_.bind("bcclAllGather", api_.AllGather);
    lib_.bind("bcclReduceScatter", api_.ReduceScatter);
    lib_.bind("bcclSend", api_.Send);
    lib_.bind("bcclRecv", api_.Recv);
    lib_.bind("bcclGroupStart", api_.GroupStart);
    lib_.bind("bcclGroupEnd", api_.GroupEnd);
    lib_.bind("bcclGetErrorString", api_.GetErrorString);
    return lib_.complete();
  }

  std::string libraryPath() const override { return lib_.path(); }

  Status uniqueId(std::string* id) override {
    UniqueId u{};
    if (Status st = check(api_.GetUniqueId(&u), "bcclGetUniqueId"); !st.ok()) return st;
    id->assign(u.internal, sizeof u.internal);
    return Status::Ok();
  }

  Status initRank(VendorComm* comm, int nranks, const std::string& id, int rank, int) override {
    if (id.size() != sizeof(UniqueId))
      return Status(Code::InvalidValue, "bcclCommInitRank: a unique id is " + std::to_string(sizeof(UniqueId)) +
                                            " bytes, got " + std::to_string(id.size()));
    UniqueId u;
    std::memcpy(u.internal, id.data(), sizeof u.internal);
    return check(api_.CommInitRank(comm, nranks, u, rank), "bcclCommInitRank");
  }

  Status destroy(VendorComm comm) override { return check(api_.CommDestroy(comm), "bcclCommDestroy"); }

  Status launch(const CommCall& k, VendorComm comm, VendorQueue s) override {
    const int dt = dtype(k.dtype);
    const int op = static_cast<int>(k.reduce);   // sum, prod, max, min: 0..3 as in NCCL
    switch (k.op) {
      case CommOp::AllReduce: return check(api_.AllReduce(k.send, k.recv, k.count, dt, op, comm, s), "bcclAllReduce");
      case CommOp::Broadcast: return check(api_.Broadcast(k.send, k.recv, k.count, dt, k.root, comm, s), "bcclBroadcast");
      case CommOp::Reduce: return check(api_.Reduce(k.send, k.recv, k.count, dt, op, k.root, comm, s), "bcclReduce");
      case CommOp::AllGather: return check(api_.AllGather(k.send, k.recv, k.count, dt, comm, s), "bcclAllGather");
      case CommOp::ReduceScatter:
        return check(api_.ReduceScatter(k.send, k.recv, k.count, dt, op, comm, s), "bcclReduceScatter");
      case CommOp::Send: return check(api_.Send(k.send, k.count, dt, k.root, comm, s), "bcclSend");
      case CommOp::Recv: return check(api_.Recv(k.recv, k.count, dt, k.root, comm, s), "bcclRecv");
    }
    return Status(Code::InvalidValue, "commLaunch: unknown operation");
  }

  Status group(bool start) override {
    return start ? check(api_.GroupStart(), "bcclGroupStart") : check(api_.GroupEnd(), "bcclGroupEnd");
  }

 private:
  static int dtype(CommDataType t) {
    switch (t) {
      case CommDataType::Int8: return 0;
      case CommDataType::UInt8: return 1;
      case CommDataType::Int32: return 2;
      case CommDataType::Int64: return 4;
      case CommDataType::Float16: return 6;
      case CommDataType::Float32: return 7;
      case CommDataType::Float64: return 8;
      case CommDataType::BFloat16: return 9;
    }
    return 7;
  }

  Status check(bcclResult r, const char* call) const {
    if (r == 0) return Status::Ok();
    const Code code = r == 4 || r == 5 ? Code::InvalidValue : Code::CommFailed;   // invalid argument/usage
    return vendorError(code, call, "bcclResult_t", r, api_.GetErrorString ? api_.GetErrorString(r) : nullptr);
  }

  DynamicLibrary lib_;
  Api api_{};
};

}  // namespace

std::unique_ptr<IVendorCollectives> openBccl(Status* why) {
  const char* home = std::getenv("BIREN_HOME");
  const std::string path = std::string(home && *home ? home : "/usr/local/birensupa/sdk/latest") + "/bccl/libbccl.so";
  auto c = std::make_unique<BcclCollectives>();
  if (Status st = c->open(path); !st.ok()) {
    *why = Status(Code::InitFailed, "native backend: " + st.message());
    return nullptr;
  }
  return c;
}

}  // namespace cardsim::shim::native
