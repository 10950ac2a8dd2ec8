// The collective part of the stub vendor libraries (StubCncl.cpp, StubBccl.cpp): the ranks
// of a clique are threads of one process (the device memory is host memory), each calling
// the collective on its own communicator; the last to arrive computes the result for all,
// as a vendor library would over its links. Send and receive go through a mailbox.
#pragma once

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace stubcomm {

enum Op { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter };
enum Elem { F32, F64, I32, I64, I8, U8, Unsupported };
enum Red { Sum, Prod, Max, Min };

struct Call {
  Op op;
  const void* send;
  void* recv;
  size_t count;
  Elem elem;
  Red red;
  int root;
};

struct Clique {
  int nranks = 0;
  std::mutex m;
  std::condition_variable cv;
  uint64_t generation = 0;
  int arrived = 0;
  std::vector<Call> calls;
  bool ok = true;
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> mail;   // (src, dst) -> messages
};

struct Comm {
  std::shared_ptr<Clique> clique;
  int rank;
};

inline std::map<std::string, std::shared_ptr<Clique>>& registry() {
  static std::map<std::string, std::shared_ptr<Clique>> r;
  return r;
}
inline std::mutex& registryMutex() {
  static std::mutex m;
  return m;
}

inline Comm* join(const std::string& id, int nranks, int rank) {
  std::lock_guard<std::mutex> lock(registryMutex());
  auto& c = registry()[id];
  if (!c) {
    c = std::make_shared<Clique>();
    c->nranks = nranks;
    c->calls.resize(static_cast<size_t>(nranks));
  }
  if (c->nranks != nranks) return nullptr;
  return new Comm{c, rank};
}

inline size_t elemSize(Elem e) {
  switch (e) {
    case F32: case I32: return 4;
    case F64: case I64: return 8;
    case I8: case U8: return 1;
    default: return 0;
  }
}

template <typename T>
void reduceInto(T* acc, const T* x, size_t n, Red r) {
  for (size_t i = 0; i < n; ++i) {
    switch (r) {
      case Sum: acc[i] = acc[i] + x[i]; break;
      case Prod: acc[i] = acc[i] * x[i]; break;
      case Max: acc[i] = acc[i] < x[i] ? x[i] : acc[i]; break;
      case Min: acc[i] = x[i] < acc[i] ? x[i] : acc[i]; break;
    }
  }
}

inline void reduceBytes(void* acc, const void* x, size_t n, Elem e, Red r) {
  switch (e) {
    case F32: reduceInto(static_cast<float*>(acc), static_cast<const float*>(x), n, r); break;
    case F64: reduceInto(static_cast<double*>(acc), static_cast<const double*>(x), n, r); break;
    case I32: reduceInto(static_cast<int32_t*>(acc), static_cast<const int32_t*>(x), n, r); break;
    case I64: reduceInto(static_cast<int64_t*>(acc), static_cast<const int64_t*>(x), n, r); break;
    case I8: reduceInto(static_cast<int8_t*>(acc), static_cast<const int8_t*>(x), n, r); break;
    case U8: reduceInto(static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(x), n, r); break;
    default: break;
  }
}

// Runs once every rank has arrived: false if the ranks disagree.
inline bool execute(std::vector<Call>& calls) {
  const Call& c0 = calls[0];
  const int n = static_cast<int>(calls.size());
  for (const Call& c : calls)
    if (c.op != c0.op || c.count != c0.count || c.elem != c0.elem || c.root != c0.root) return false;
  const size_t es = elemSize(c0.elem), bytes = c0.count * es;
  std::vector<char> acc;
  switch (c0.op) {
    case AllReduce:
    case Reduce:
      acc.assign(static_cast<const char*>(calls[0].send), static_cast<const char*>(calls[0].send) + bytes);
      for (int r = 1; r < n; ++r) reduceBytes(acc.data(), calls[r].send, c0.count, c0.elem, c0.red);
      for (int r = 0; r < n; ++r)
        if (c0.op == AllReduce || r == c0.root) std::memcpy(calls[r].recv, acc.data(), bytes);
      return true;
    case Broadcast:
      acc.assign(static_cast<const char*>(calls[c0.root].send), static_cast<const char*>(calls[c0.root].send) + bytes);
      for (int r = 0; r < n; ++r) std::memcpy(calls[r].recv, acc.data(), bytes);
      return true;
    case AllGather:
      for (int r = 0; r < n; ++r) acc.insert(acc.end(), static_cast<const char*>(calls[r].send),
                                             static_cast<const char*>(calls[r].send) + bytes);
      for (int r = 0; r < n; ++r) std::memcpy(calls[r].recv, acc.data(), acc.size());
      return true;
    case ReduceScatter:
      for (int r = 0; r < n; ++r) {
        acc.assign(static_cast<const char*>(calls[0].send) + r * bytes, static_cast<const char*>(calls[0].send) + (r + 1) * bytes);
        for (int k = 1; k < n; ++k)
          reduceBytes(acc.data(), static_cast<const char*>(calls[k].send) + r * bytes, c0.count, c0.elem, c0.red);
        std::memcpy(calls[r].recv, acc.data(), bytes);
      }
      return true;
  }
  return false;
}

// Blocks until every rank of the clique made its call; true if the collective ran.
inline bool collective(Comm* comm, const Call& call) {
  Clique& c = *comm->clique;
  std::unique_lock<std::mutex> l(c.m);
  const uint64_t gen = c.generation;
  c.calls[static_cast<size_t>(comm->rank)] = call;
  if (++c.arrived == c.nranks) {
    c.ok = execute(c.calls);
    c.arrived = 0;
    ++c.generation;
    c.cv.notify_all();
    return c.ok;
  }
  c.cv.wait(l, [&] { return c.generation != gen; });
  return c.ok;
}

inline void send(Comm* comm, int peer, const void* buf, size_t bytes) {
  Clique& c = *comm->clique;
  std::lock_guard<std::mutex> l(c.m);
  c.mail[{comm->rank, peer}].emplace_back(static_cast<const char*>(buf), static_cast<const char*>(buf) + bytes);
  c.cv.notify_all();
}

inline bool recv(Comm* comm, int peer, void* buf, size_t bytes) {
  Clique& c = *comm->clique;
  std::unique_lock<std::mutex> l(c.m);
  auto& box = c.mail[{peer, comm->rank}];
  c.cv.wait(l, [&] { return !box.empty(); });
  const bool ok = box.front().size() == bytes;
  if (ok) std::memcpy(buf, box.front().data(), bytes);
  box.pop_front();
  return ok;
}

// One library's communicators (guarded by the stub state's mutex); those a process never
// destroyed go with it.
struct Comms : std::set<Comm*> {
  ~Comms() {
    for (Comm* c : *this) delete c;
  }
};

// A collective call as both collective stubs check it: a communicator of this library, a
// queue its runtime stub handed out, a known element type and reduce op; `invalid` if not,
// `disagree` if the ranks' calls do not match.
inline int run(Comms& comms, std::mutex& mutex, void* comm, bool valid_queue, const Call& call, int invalid,
               int disagree) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!comms.count(static_cast<Comm*>(comm))) return invalid;
  }
  if (!valid_queue || call.elem == Unsupported || int(call.red) > 3) return invalid;
  return collective(static_cast<Comm*>(comm), call) ? 0 : disagree;
}

}  // namespace stubcomm
