// Shared state of the stub vendor runtimes (StubCnrt.cpp, StubSupa.cpp): devices whose
// memory is host memory, queues and notifiers as checked handles, a log of every call with
// its arguments, and scripted results. The tests drive it through the stub's extern "C"
// control functions (cardsimStub*), which a real runtime does not have.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace stub {

struct Queue { int device; int priority; };
struct Notifier { unsigned flags; bool placed = false; double t_ms = 0; };

struct State {
  std::mutex mutex;
  int devices = 2;
  uint64_t total_bytes = 16ull << 30;
  thread_local static int current;
  std::map<void*, std::pair<size_t, int>> device_allocs;   // ptr -> (bytes, device)
  std::set<void*> host_allocs;
  std::set<Queue*> queues;
  std::set<Notifier*> notifiers;
  std::string log;                           // one call per line: "name(args)"
  std::map<std::string, std::pair<int, int>> scripted;   // call -> (code, times left)

  State() {
    if (const char* n = std::getenv("CARDSIM_STUB_DEVICES")) devices = std::atoi(n);
  }
  // A real runtime reclaims what a process leaves behind when it tears its context down.
  ~State() {
    for (auto& [p, a] : device_allocs) std::free(p);
    for (void* p : host_allocs) std::free(p);
    for (Queue* q : queues) delete q;
    for (Notifier* n : notifiers) delete n;
  }
  static State& get() { static State s; return s; }

  // The scripted result for `call`, consumed once; 0 if none.
  int scriptedResult(const char* call) {
    auto it = scripted.find(call);
    if (it == scripted.end() || it->second.second == 0) return 0;
    --it->second.second;
    return it->second.first;
  }
  void note(const std::string& line) { log += line + "\n"; }
  uint64_t used(int d) const {
    uint64_t u = 0;
    for (const auto& [p, a] : device_allocs) if (a.second == d) u += a.first;
    return u;
  }
  // Device memory or a host pointer the stub handed out, or plain host memory: all host.
  bool isDevice(const void* p) const {
    auto it = device_allocs.upper_bound(const_cast<void*>(p));
    if (it == device_allocs.begin()) return false;
    --it;
    return static_cast<const char*>(p) < static_cast<const char*>(it->first) + it->second.first;
  }
  bool validQueue(void* q) const { return q == nullptr || queues.count(static_cast<Queue*>(q)); }
  bool validNotifier(void* n) const { return notifiers.count(static_cast<Notifier*>(n)) != 0; }
  static double nowMs() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
  }
};
inline thread_local int State::current = 0;

inline std::string hexPtr(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

}  // namespace stub

// What every stub library exports, as a real vendor library does.
#define STUB_API extern "C" __attribute__((visibility("default")))

// The start of every stubbed call: log it with its arguments, then fail with the scripted
// result if one is due. The runtime stubs keep the state locked for the rest of the call
// (STUB_BEGIN_LOCKED); the collective stubs let go (STUB_BEGIN), since their ranks, threads
// of one process, meet inside the call.
#define STUB_BEGIN_LOCKED(name, args)                         \
  stub::State& S = stub::State::get();                        \
  std::lock_guard<std::mutex> lock(S.mutex);                  \
  S.note(std::string(name) + "(" + args + ")");               \
  if (int r = S.scriptedResult(name)) return r
#define STUB_BEGIN(name, args)                                \
  stub::State& S = stub::State::get();                        \
  {                                                           \
    std::lock_guard<std::mutex> lock(S.mutex);                \
    S.note(std::string(name) + "(" + args + ")");             \
    if (int r = S.scriptedResult(name)) return r;             \
  }

// Control functions common to both stubs (defined once per stub library).
#define STUB_CONTROL_FUNCTIONS                                                              \
  extern "C" __attribute__((visibility("default"))) const char* cardsimStubLog() {         \
    static std::string copy;                                                                \
    std::lock_guard<std::mutex> lock(stub::State::get().mutex);                             \
    copy = stub::State::get().log;                                                          \
    return copy.c_str();                                                                    \
  }                                                                                         \
  extern "C" __attribute__((visibility("default"))) void cardsimStubClearLog() {           \
    std::lock_guard<std::mutex> lock(stub::State::get().mutex);                             \
    stub::State::get().log.clear();                                                         \
  }                                                                                         \
  extern "C" __attribute__((visibility("default"))) void cardsimStubScript(                \
      const char* call, int code, int times) {                                              \
    std::lock_guard<std::mutex> lock(stub::State::get().mutex);                             \
    stub::State::get().scripted[call] = {code, times};                                      \
  }

// The runtime stubs' queue check, which their collective libraries call.
#define STUB_QUEUE_CHECK                                                                    \
  extern "C" __attribute__((visibility("default"))) int cardsimStubValidQueue(void* q) {   \
    std::lock_guard<std::mutex> lock(stub::State::get().mutex);                             \
    return stub::State::get().validQueue(q);                                                \
  }
