#include "DeviceMemory.h"

#include "HostAccessGuard.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace cardsim::shim {
namespace {

std::string human(uint64_t bytes) {
  char buf[64];
  const double gib = static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
  if (gib >= 1.0) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", gib);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  }
  return std::string(buf) + " (" + std::to_string(bytes) + " bytes)";
}

std::size_t pageRound(std::size_t n) {
  static const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

std::string hexPtr(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

}  // namespace

DeviceMemory::DeviceMemory(std::vector<uint64_t> capacity_per_device,
                           std::vector<std::string> device_names)
    : capacity_(std::move(capacity_per_device)),
      used_(capacity_.size(), 0),
      names_(std::move(device_names)) {}

Status DeviceMemory::allocate(int device, std::size_t bytes, void** out) {
  *out = nullptr;
  if (bytes == 0) return Status::Ok();
  const size_t d = static_cast<size_t>(device);
  const uint64_t accounted = (bytes + kGranularity - 1) / kGranularity * kGranularity;
  std::lock_guard<std::mutex> lock(mutex_);
  if (accounted > capacity_[d] - used_[d]) {
    return Status(Code::OutOfMemory,
                  "device " + std::to_string(device) + " (" + names_[d] + "): cannot allocate " +
                      human(bytes) + ": " + human(capacity_[d]) + " total, " + human(used_[d]) +
                      " allocated, " + human(capacity_[d] - used_[d]) + " free");
  }
  const std::size_t mapped = pageRound(bytes);
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return Status(Code::OutOfMemory, "device " + std::to_string(device) + ": the host could not reserve " +
                                         human(bytes) + " of address space: " + std::strerror(errno));
  }
  used_[d] += accounted;
  blocks_.emplace(reinterpret_cast<uintptr_t>(p), Block{bytes, mapped, device});
  HostAccessGuard::instance().mapped(p, mapped, bytes, device);
  *out = p;
  return Status::Ok();
}

Status DeviceMemory::release(void* ptr, int* device_out) {
  if (!ptr) return Status::Ok();
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == blocks_.end() || it->second.device < 0) {
    return Status(Code::InvalidValue, "free: pointer " + hexPtr(ptr) +
                                          " is not the start of a device allocation (never "
                                          "allocated, already freed, or host memory)");
  }
  const Block b = it->second;
  blocks_.erase(it);
  used_[static_cast<size_t>(b.device)] -= (b.size + kGranularity - 1) / kGranularity * kGranularity;
  HostAccessGuard::instance().unmapped(ptr);
  munmap(ptr, b.mapped);
  if (device_out) *device_out = b.device;
  return Status::Ok();
}

Status DeviceMemory::hostAllocate(std::size_t bytes, void** out) {
  *out = nullptr;
  if (bytes == 0) return Status::Ok();
  const std::size_t mapped = pageRound(bytes);
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return Status(Code::OutOfMemory, "hostMalloc: cannot allocate " + human(bytes) +
                                         " of pinned host memory: " + std::strerror(errno));
  std::lock_guard<std::mutex> lock(mutex_);
  blocks_.emplace(reinterpret_cast<uintptr_t>(p), Block{bytes, mapped, -1});
  *out = p;
  return Status::Ok();
}

Status DeviceMemory::hostRelease(void* ptr) {
  if (!ptr) return Status::Ok();
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == blocks_.end() || it->second.device >= 0 || it->second.registered)
    return Status(Code::InvalidValue, "hostFree: pointer " + hexPtr(ptr) +
                                          " was not returned by hostMalloc (or is already freed)");
  munmap(ptr, it->second.mapped);
  blocks_.erase(it);
  return Status::Ok();
}

Status DeviceMemory::hostRegister(void* ptr, std::size_t bytes) {
  if (!ptr || bytes == 0)
    return Status(Code::InvalidValue, "hostRegister: null pointer or zero size");
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  auto next = blocks_.lower_bound(p);
  if (next != blocks_.end() && next->first < p + bytes)
    return Status(Code::InvalidValue, "hostRegister: range " + hexPtr(ptr) + " + " + human(bytes) +
                                          " overlaps memory the runtime already knows");
  if (next != blocks_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > p)
      return Status(Code::InvalidValue, "hostRegister: range " + hexPtr(ptr) + " + " + human(bytes) +
                                            " overlaps memory the runtime already knows");
  }
  Block b{bytes, 0, -1};
  b.registered = true;
  blocks_.emplace(p, b);
  return Status::Ok();
}

Status DeviceMemory::hostUnregister(void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == blocks_.end() || !it->second.registered)
    return Status(Code::InvalidValue, "hostUnregister: pointer " + hexPtr(ptr) + " was not registered");
  blocks_.erase(it);
  return Status::Ok();
}

uint64_t DeviceMemory::used(int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return used_.at(static_cast<size_t>(device));
}

bool DeviceMemory::find(const void* ptr, Found* out) const {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.upper_bound(p);
  if (it == blocks_.begin()) return false;
  --it;
  if (p >= it->first + it->second.size && !(p == it->first && it->second.size == 0)) return false;
  out->device_memory = it->second.device >= 0;
  out->device = it->second.device;
  out->base = reinterpret_cast<uint8_t*>(it->first);
  out->size = it->second.size;
  return true;
}

}  // namespace cardsim::shim
