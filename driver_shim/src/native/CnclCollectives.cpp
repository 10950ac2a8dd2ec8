// Cambricon's CNCL (libcncl.so, beside libcnrt.so) behind IVendorCollectives. Prototypes and
// values follow CNCL 1.x's public cncl.h: cnclInitComms takes arrays (one communicator per
// call here, on the current device), every collective takes the MLU queue last, and
// cnclAllGather/cnclReduceScatter count the elements of one rank's part.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "native/DynamicLibrary.h"
#include "native/VendorRuntime.h"

namespace cardsim::shim::native {
namespace {

using cnclResult = int;
using Comm = void*;
using Queue = void*;
constexpr std::size_t kCliqueBytes = 128;
struct CliqueId {
  char data[kCliqueBytes];
  uint64_t hash;
};
constexpr int kSum = 0, kProd = 1, kMax = 2, kMin = 3;

struct Api {
  cnclResult (*GetCliqueId)(CliqueId*);
  cnclResult (*InitComms)(Comm*, int, const int*, const int*, int, const CliqueId*);
  cnclResult (*DestroyComms)(Comm*, int);
  cnclResult (*AllReduce)(const void*, void*, size_t, int, int, Comm, Queue);
  cnclResult (*Broadcast)(const void*, void*, size_t, int, int, Comm, Queue);
  cnclResult (*Reduce)(const void*, void*, size_t, int, int, int, Comm, Queue);
  cnclResult (*AllGather)(const void*, void*, size_t, int, Comm, Queue);
  cnclResult (*ReduceScatter)(const void*, void*, size_t, int, int, Comm, Queue);
  cnclResult (*Send)(void*, size_t, int, int, Comm, Queue);
  cnclResult (*Recv)(void*, size_t, int, int, Comm, Queue);
  cnclResult (*GroupStart)();
  cnclResult (*GroupEnd)();
  const char* (*GetErrorStr)(cnclResult);
};

class CnclCollectives final : public IVendorCollectives {
 public:
  Status open(const std::string& path) {
    if (Status st = lib_.open(path); !st.ok()) return st;
    lib_.bind("cnclGetCliqueId", api_.GetCliqueId);
    lib_.bind("cnclInitComms", api_.InitComms);
    lib_.bind("cnclDestroyComms", api_.DestroyComms);
    lib_.bind("cnclAllReduce", api_.AllReduce);
    lib_.bind("cnclBroadcast", api_.Broadcast);
    lib_.bind("cnclReduce", api_.Reduce);
    lib_.bind("cnclAllGather", api_.AllGather);
    lib_.bind("cnclReduceScatter", api_.ReduceScatter);
    lib_.bind("cnclSend", api_.Send);
    lib_.bind("cnclRecv", api_.Recv);
    lib_.bind("cnclGroupStart", api_.GroupStart);
    lib_.bind("cnclGroupEnd", api_.GroupEnd);
    lib_.bind("cnclGetErrorStr", api_.GetErrorStr);
    return lib_.complete();
  }

  std::string libraryPath() const override { return lib_.path(); }

  Status uniqueId(std::string* id) override {
    CliqueId c{};
    if (Status st = check(api_.GetCliqueId(&c), "cnclGetCliqueId"); !st.ok()) return st;
    id->assign(reinterpret_cast<const char*>(&c), sizeof c);
    return Status::Ok();
  }

  Status initRank(VendorComm* comm, int nranks, const std::string& id, int rank, int device) override {
    if (id.size() != sizeof(CliqueId))
      return Status(Code::InvalidValue, "cnclInitComms: a clique id is " + std::to_string(sizeof(CliqueId)) +
                                            " bytes, got " + std::to_string(id.size()));
    CliqueId c;
    std::memcpy(&c, id.data(), sizeof c);
    return check(api_.InitComms(comm, 1, &device, &rank, nranks, &c), "cnclInitComms");
  }

  Status destroy(VendorComm comm) override { return check(api_.DestroyComms(&comm, 1), "cnclDestroyComms"); }

  Status launch(const CommCall& k, VendorComm comm, VendorQueue q) override {
    int dt = 0;
    if (Status st = dtype(k.dtype, &dt); !st.ok()) return st;
    const int op = k.reduce == CommReduceOp::Sum ? kSum : k.reduce == CommReduceOp::Prod ? kProd
                   : k.reduce == CommReduceOp::Max ? kMax : kMin;
    switch (k.op) {
      case CommOp::AllReduce: return check(api_.AllReduce(k.send, k.recv, k.count, dt, op, comm, q), "cnclAllReduce");
      case CommOp::Broadcast: return check(api_.Broadcast(k.send, k.recv, k.count, dt, k.root, comm, q), "cnclBroadcast");
      case CommOp::Reduce: return check(api_.Reduce(k.send, k.recv, k.count, dt, op, k.root, comm, q), "cnclReduce");
      case CommOp::AllGather: return check(api_.AllGather(k.send, k.recv, k.count, dt, comm, q), "cnclAllGather");
      case CommOp::ReduceScatter:
        return check(api_.ReduceScatter(k.send, k.recv, k.count, dt, op, comm, q), "cnclReduceScatter");
      case CommOp::Send: return check(api_.Send(const_cast<void*>(k.send), k.count, dt, k.root, comm, q), "cnclSend");
      case CommOp::Recv: return check(api_.Recv(k.recv, k.count, dt, k.root, comm, q), "cnclRecv");
    }
    return Status(Code::InvalidValue, "commLaunch: unknown operation");
  }

  Status group(bool start) override {
    return start ? check(api_.GroupStart(), "cnclGroupStart") : check(api_.GroupEnd(), "cnclGroupEnd");
  }

 private:
  static Status dtype(CommDataType t, int* out) {
    switch (t) {
      case CommDataType::Float16: *out = 0x10; return Status::Ok();
      case CommDataType::BFloat16: *out = 0x11; return Status::Ok();
      case CommDataType::Float32: *out = 0x12; return Status::Ok();
      case CommDataType::Int8: *out = 0x20; return Status::Ok();
      case CommDataType::Int32: *out = 0x22; return Status::Ok();
      case CommDataType::Int64: *out = 0x23; return Status::Ok();
      case CommDataType::UInt8: *out = 0x30; return Status::Ok();
      case CommDataType::Float64: break;
    }
    return Status(Code::NotSupported, "CNCL has no float64 collectives (cnclDataType_t)");
  }

  Status check(cnclResult r, const char* call) const {
    if (r == 0) return Status::Ok();
    const Code code = r == 0x07 || r == 0x21 ? Code::InvalidValue : r == 0x11 ? Code::NotSupported : Code::CommFailed;
    return vendorError(code, call, "cnclResult_t", r, api_.GetErrorStr ? api_.GetErrorStr(r) : nullptr);
  }

  DynamicLibrary lib_;
  Api api_{};
};

}  // namespace

std::unique_ptr<IVendorCollectives> openCncl(Status* why) {
  const char* home = std::getenv("NEUWARE_HOME");
  const std::string path = std::string(home && *home ? home : "/usr/local/neuware") + "/lib64/libcncl.so";
  auto c = std::make_unique<CnclCollectives>();
  if (Status st = c->open(path); !st.ok()) {
    *why = Status(Code::InitFailed, "native backend: " + st.message());
    return nullptr;
  }
  return c;
}

}  // namespace cardsim::shim::native
