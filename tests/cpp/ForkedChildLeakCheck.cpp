// Linked into every GoogleTest executable. Several tests fork a child of a process that
// runs the simulator's threads; only the forking thread survives in the child, so heap
// blocks that were reachable only from the other threads' stacks at that instant look
// leaked to LeakSanitizer when the child exits (a real program's children are no
// different, and the parent's own leak check still covers those blocks). The check at
// exit is skipped in forked children only; LeakSanitizer asks this hook before it runs.
#include <pthread.h>

#include <atomic>

namespace {
std::atomic<bool> g_forked_child{false};

const bool g_registered = [] {
  pthread_atfork(nullptr, nullptr, [] { g_forked_child.store(true); });
  return true;
}();
}  // namespace

extern "C" int __lsan_is_turned_off() { return g_forked_child.load() ? 1 : 0; }
