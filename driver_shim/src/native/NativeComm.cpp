// NativeBackend's communicators: the vendor's collective library (CNCL for CNRT, BCCL for
// the SUPA runtime), opened on the first call that needs it.
#include "native/NativeBackend.h"

namespace cardsim::shim::native {

struct NativeComm {
  VendorComm comm = nullptr;
  int device = 0;
  int rank = 0;
  int nranks = 0;
};
NativeComm* nat(Comm c) { return reinterpret_cast<NativeComm*>(c); }

void NativeBackend::deleteComms() {
  for (void* c : comms_) delete static_cast<NativeComm*>(c);
  comms_.clear();
}

Status NativeBackend::collectives(IVendorCollectives** out) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!coll_) {
    Status why;
    coll_ = std::string(rt_->runtimeName()) == "CNRT" ? openCncl(&why) : openBccl(&why);
    if (!coll_) return why;
  }
  *out = coll_.get();
  return Status::Ok();
}

Status NativeBackend::commGetUniqueId(std::string* id) {
  if (!id) return nullArg("commGetUniqueId", "id");
  IVendorCollectives* c = nullptr;
  if (Status st = collectives(&c); !st.ok()) return st;
  return c->uniqueId(id);
}

Status NativeBackend::commInitRank(Comm* comm, int nranks, const std::string& id, int rank) {
  if (!comm) return nullArg("commInitRank", "comm");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return Status(Code::InvalidValue, "commInitRank: rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  IVendorCollectives* c = nullptr;
  if (Status st = collectives(&c); !st.ok()) return st;
  auto n = std::make_unique<NativeComm>();
  if (Status st = currentDevice(&n->device); !st.ok()) return st;
  if (Status st = c->initRank(&n->comm, nranks, id, rank, n->device); !st.ok()) return st;
  n->rank = rank;
  n->nranks = nranks;
  std::lock_guard<std::mutex> lock(mutex_);
  comms_.insert(n.get());
  *comm = reinterpret_cast<Comm>(n.release());
  return Status::Ok();
}

Status NativeBackend::commDestroy(Comm comm) {
  if (!comm) return Status(Code::InvalidHandle, "commDestroy: null communicator");
  IVendorCollectives* c = nullptr;
  if (Status st = collectives(&c); !st.ok()) return st;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!comms_.erase(nat(comm))) return Status(Code::InvalidHandle, "commDestroy: not a live communicator");
  }
  std::unique_ptr<NativeComm> n(nat(comm));
  return c->destroy(n->comm);
}

Status NativeBackend::commLaunch(const CommCall& call, Comm comm, Stream stream) {
  if (!comm) return Status(Code::InvalidHandle, "commLaunch: null communicator");
  NativeStream* s = nullptr;
  if (Status st = resolve(stream, "commLaunch", &s); !st.ok()) return st;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (s->capture)
      return Status(Code::NotSupported, "commLaunch: the native backend does not capture collectives into a graph");
  }
  const bool p2p = call.op == CommOp::Send || call.op == CommOp::Recv;
  if (call.root < 0 || call.root >= nat(comm)->nranks)
    return Status(Code::InvalidValue, std::string("commLaunch: ") + (p2p ? "peer " : "root ") +
                                          std::to_string(call.root) + " of " + std::to_string(nat(comm)->nranks) +
                                          " ranks");
  IVendorCollectives* c = nullptr;
  if (Status st = collectives(&c); !st.ok()) return st;
  return c->launch(call, nat(comm)->comm, s->queue);
}

Status NativeBackend::commGroup(bool start) {
  IVendorCollectives* c = nullptr;
  if (Status st = collectives(&c); !st.ok()) return st;
  return c->group(start);
}

}  // namespace cardsim::shim::native
