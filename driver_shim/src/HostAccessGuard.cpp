#include "HostAccessGuard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace cardsim::shim {
namespace {

struct sigaction g_previous;
std::atomic<bool> g_handler_installed{false};

void writeAll(const char* s, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<std::size_t>(w);
  }
}

// A fault on guarded device memory is reported, then the previous disposition is restored
// and the access retried: it faults again into Python's faulthandler (the Python stack) or
// the default action. A fault anywhere else goes the same way without a report.
void onFault(int sig, siginfo_t* info, void*) {
  HostAccessGuard& g = HostAccessGuard::instance();
  HostAccessGuard::Range r;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  if (g.enabled() && !g.windowOpen() && g.tryFind(addr, &r)) {
    char buf[768];
    const int n = std::snprintf(
        buf, sizeof buf,
        "cardsim check: host access to device memory: the host dereferenced device address 0x%lx "
        "(device %d, in the allocation at 0x%lx of %zu bytes, offset %zu) outside the runtime's copies and "
        "kernels. On a real card device memory is not host memory: this access would crash or read "
        "garbage. Copy the tensor to the host (tensor.cpu()) or do the work in a device operator. "
        "The process stops here%s\n",
        static_cast<unsigned long>(addr), r.device, static_cast<unsigned long>(r.base), r.size,
        static_cast<std::size_t>(addr - r.base),
        g_previous.sa_handler == SIG_DFL ? "." : "; the Python stack follows.");
    if (n > 0) writeAll(buf, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof buf - 1));
  }
  sigaction(sig, &g_previous, nullptr);
}

}  // namespace

HostAccessGuard& HostAccessGuard::instance() {
  static HostAccessGuard* g = new HostAccessGuard();   // outlives every static destructor
  return *g;
}

void HostAccessGuard::protectAllLocked(bool accessible) {
  const int prot = accessible ? PROT_READ | PROT_WRITE : PROT_NONE;
  for (const auto& [base, r] : ranges_) mprotect(reinterpret_cast<void*>(base), r.mapped, prot);
}

void HostAccessGuard::setEnabled(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (on == enabled_.load()) return;
  if (on && !g_handler_installed.exchange(true)) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = &onFault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous);
  }
  enabled_.store(on);
  if (depth_.load() == 0) protectAllLocked(!on);
}

void HostAccessGuard::open() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (depth_.fetch_add(1) == 0 && enabled_.load()) protectAllLocked(true);
}

void HostAccessGuard::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (depth_.fetch_sub(1) == 1 && enabled_.load()) protectAllLocked(false);
}

void HostAccessGuard::mapped(void* base, std::size_t mapped_bytes, std::size_t size, int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uintptr_t b = reinterpret_cast<uintptr_t>(base);
  ranges_[b] = Range{b, mapped_bytes, size, device};
  if (enabled_.load() && depth_.load() == 0) mprotect(base, mapped_bytes, PROT_NONE);
}

void HostAccessGuard::unmapped(void* base) {
  std::lock_guard<std::mutex> lock(mutex_);
  ranges_.erase(reinterpret_cast<uintptr_t>(base));
}

bool HostAccessGuard::tryFind(uintptr_t addr, Range* out) {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  auto it = ranges_.upper_bound(addr);
  if (it == ranges_.begin()) return false;
  --it;
  if (addr >= it->first + it->second.mapped) return false;
  *out = it->second;
  return true;
}

}  // namespace cardsim::shim
