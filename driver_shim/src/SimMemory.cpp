// The `sim` backend: device and pinned host memory, memset and copies.
#include "SimBackend.h"

namespace cardsim::shim::simbackend {

Status SimBackend::malloc(void** ptr, std::size_t bytes) {
  if (!ptr) return nullArg("malloc", "ptr");
  if (Status st = checkUnsafeCall("malloc"); !st.ok()) return st;
  sim_.hostAdvance(params_.host.alloc_overhead_s);
  return memory_.allocate(t_current_device, bytes, ptr);
}

Status SimBackend::free(void* ptr) {
  if (!ptr) return Status::Ok();
  if (Status st = checkUnsafeCall("free"); !st.ok()) return st;
  DeviceMemory::Found f;
  if (!memory_.find(ptr, &f) || !f.device_memory || f.base != ptr)
    return memory_.release(ptr, nullptr);  // produces the error message
  // Vendor runtimes synchronize the device before releasing memory.
  Status s = guard([&] {
    sim_.waitFor(sim_.deviceTails(dev(f.device)), params_.host.alloc_overhead_s);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  if (carrying_) carried_.scrub(ptr, f.size);
  return memory_.release(ptr, nullptr);
}

Status SimBackend::timingNoteHostWrite(const void* ptr, std::size_t bytes) {
  if (!carrying_ || bytes == 0) return Status::Ok();
  DeviceMemory::Found f;
  if (!memory_.find(ptr, &f) || !f.device_memory) return Status::Ok();   // host memory: nothing to remember
  carried_.note(ptr, bytes);
  return Status::Ok();
}

Status SimBackend::timingScrub(void* ptr, std::size_t bytes) {
  if (carrying_ && ptr && bytes) carried_.scrub(ptr, bytes);
  return Status::Ok();
}

Status SimBackend::memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return nullArg("memGetInfo", "free/total");
  const uint64_t cap = memory_.capacity(t_current_device);
  *total_bytes = cap;
  *free_bytes = cap - memory_.used(t_current_device);
  return Status::Ok();
}

Status SimBackend::hostMalloc(void** ptr, std::size_t bytes) {
  if (!ptr) return nullArg("hostMalloc", "ptr");
  sim_.hostAdvance(params_.host.alloc_overhead_s);
  return memory_.hostAllocate(bytes, ptr);
}

Status SimBackend::hostFree(void* ptr) { return memory_.hostRelease(ptr); }

Status SimBackend::hostRegister(void* ptr, std::size_t bytes) {
  sim_.hostAdvance(params_.host.alloc_overhead_s);
  return memory_.hostRegister(ptr, bytes);
}

Status SimBackend::hostUnregister(void* ptr) { return memory_.hostUnregister(ptr); }

Status SimBackend::pointerGetAttributes(PointerAttributes* a, const void* ptr) {
  if (!a) return nullArg("pointerGetAttributes", "attrs");
  *a = PointerAttributes{};
  DeviceMemory::Found f;
  if (ptr && memory_.find(ptr, &f)) {
    a->type = f.device_memory ? PointerAttributes::Type::Device : PointerAttributes::Type::Host;
    a->device = f.device;
    a->base = f.base;
    a->size = f.size;
  }
  return Status::Ok();
}

Status SimBackend::memset(void* ptr, int value, std::size_t bytes, Stream stream, bool async) {
  const char* what = async ? "memsetAsync" : "memset";
  StreamObject* s = nullptr;
  if (Status st = resolve(stream, what, &s); !st.ok()) return st;
  DeviceMemory::Found f;
  if (bytes > 0) {
    if (Status st = checkDeviceRange(what, "destination", ptr, bytes, &f); !st.ok()) return st;
  }
  model::Command cmd;
  cmd.kind = CommandKind::Copy;
  cmd.copy_kind = model::CopyKind::Memset;
  cmd.bytes = bytes;
  const bool touch = !timing_;   // device memory is never touched in timing mode
  auto work = [ptr, value, bytes, touch] {
    if (bytes > 0 && touch) std::memset(ptr, value, bytes);
  };
  if (capturing(s)) {
    if (!async) return breakCapture(s, what);
    return record(s, "memset", work, std::move(cmd));
  }
  if (!async)
    if (Status st = checkUnsafeCall(what); !st.ok()) return st;
  work();
  return submitAndMaybeWait(s, std::move(cmd), "memset", params_.host.memcpy_overhead_s, !async);
}

Status SimBackend::memcpy(void* dst, const void* src, std::size_t bytes, MemcpyKind kind, Stream stream,
              bool async) {
  const char* what = async ? "memcpyAsync" : "memcpy";
  StreamObject* s = nullptr;
  if (Status st = resolve(stream, what, &s); !st.ok()) return st;
  if (bytes == 0) return Status::Ok();
  if (!dst || !src)
    return Status(Code::InvalidValue, std::string(what) + ": " + (dst ? "source" : "destination") +
                                          " pointer is null");
  DeviceMemory::Found fs, fd;
  const bool src_dev = memory_.find(src, &fs) && fs.device_memory;
  const bool dst_dev = memory_.find(dst, &fd) && fd.device_memory;
  if (kind == MemcpyKind::Default) {
    kind = src_dev ? (dst_dev ? MemcpyKind::DeviceToDevice : MemcpyKind::DeviceToHost)
                   : (dst_dev ? MemcpyKind::HostToDevice : MemcpyKind::HostToHost);
  }
  const bool want_src_dev = kind == MemcpyKind::DeviceToHost || kind == MemcpyKind::DeviceToDevice;
  const bool want_dst_dev = kind == MemcpyKind::HostToDevice || kind == MemcpyKind::DeviceToDevice;
  if (want_src_dev) {
    if (Status st = checkDeviceRange(what, "source", src, bytes, &fs); !st.ok()) return st;
  } else if (src_dev) {
    return Status(Code::InvalidValue, std::string(what) + " " + memcpyKindName(kind) +
                                          ": source is device memory of device " +
                                          std::to_string(fs.device));
  }
  if (want_dst_dev) {
    if (Status st = checkDeviceRange(what, "destination", dst, bytes, &fd); !st.ok()) return st;
  } else if (dst_dev) {
    return Status(Code::InvalidValue, std::string(what) + " " + memcpyKindName(kind) +
                                          ": destination is device memory of device " +
                                          std::to_string(fd.device));
  }
  if (kind == MemcpyKind::HostToHost) {
    if (capturing(s)) return breakCapture(s, "memcpy HostToHost");
    if (!discard_data_) std::memmove(dst, src, bytes);
    return Status::Ok();
  }

  model::Command cmd;
  cmd.kind = CommandKind::Copy;
  cmd.bytes = bytes;
  bool pageable = false;
  if (kind == MemcpyKind::HostToDevice) {
    cmd.copy_kind = model::CopyKind::HostToDevice;
    pageable = !isPinned(src);
  } else if (kind == MemcpyKind::DeviceToHost) {
    cmd.copy_kind = model::CopyKind::DeviceToHost;
    pageable = !isPinned(dst);
  } else if (fs.device != fd.device) {
    cmd.copy_kind = model::CopyKind::PeerToPeer;
    const bool on_src = s->device == fs.device;
    cmd.peer = dev(on_src ? fd.device : fs.device);
    cmd.peer_is_source = !on_src;
    if (s->device != fs.device && s->device != fd.device)
      return Status(Code::InvalidValue, std::string(what) + ": stream of device " +
                                            std::to_string(s->device) +
                                            " cannot copy between devices " +
                                            std::to_string(fs.device) + " and " +
                                            std::to_string(fd.device));
  } else {
    cmd.copy_kind = model::CopyKind::DeviceToDevice;
  }
  cmd.pageable = pageable;
  std::function<void()> work = [dst, src, bytes] { std::memmove(dst, src, bytes); };
  // Timing mode: device memory is not touched and the host receives the documented fill
  // (zeros), except for small host data, which the card carries (shim.h, CarriedData.h).
  // Without moving data (a replay), neither side is touched.
  if (discard_data_) {
    work = [] {};
  } else if (timing_) {
    const bool carried = bytes <= kTimingCarriedBytes;
    if (kind == MemcpyKind::HostToDevice && carried)
      work = [this, dst, src, bytes] {
        std::memcpy(dst, src, bytes);
        carried_.note(dst, bytes);
      };
    else if (kind == MemcpyKind::DeviceToHost && !carried)
      work = [dst, bytes] { std::memset(dst, 0, bytes); };
    else if (kind != MemcpyKind::DeviceToHost)
      work = [] {};
  }
  const char* label = model::copyKindName(cmd.copy_kind);
  if (capturing(s)) {
    if (!async) return breakCapture(s, what);
    return record(s, label, work, std::move(cmd));
  }
  if (!async)
    if (Status st = checkUnsafeCall(what); !st.ok()) return st;
  if (cmd.copy_kind == model::CopyKind::PeerToPeer) {
    if (Status st = guard([&] { reportPeerCopy(s, fs.device, fd.device, bytes); return Status::Ok(); }); !st.ok())
      return st;
  }
  work();
  // Copies from or to pageable host memory are staged and block the host, as on the card.
  const bool wait = !async || pageable;
  return submitAndMaybeWait(s, std::move(cmd), label, params_.host.memcpy_overhead_s, wait);
}

Status SimBackend::memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                       std::size_t bytes, Stream stream) {
  if (dst_device < 0 || dst_device >= devices_) return invalidDevice(dst_device, devices_);
  if (src_device < 0 || src_device >= devices_) return invalidDevice(src_device, devices_);
  DeviceMemory::Found f;
  if (bytes > 0) {
    if (Status st = checkDeviceRange("memcpyPeerAsync", "source", src, bytes, &f); !st.ok()) return st;
    if (f.device != src_device)
      return Status(Code::InvalidValue, "memcpyPeerAsync: source is on device " +
                                            std::to_string(f.device) + ", not " +
                                            std::to_string(src_device));
    if (Status st = checkDeviceRange("memcpyPeerAsync", "destination", dst, bytes, &f); !st.ok()) return st;
    if (f.device != dst_device)
      return Status(Code::InvalidValue, "memcpyPeerAsync: destination is on device " +
                                            std::to_string(f.device) + ", not " +
                                            std::to_string(dst_device));
  }
  return memcpy(dst, src, bytes, MemcpyKind::DeviceToDevice, stream, true);
}

}  // namespace cardsim::shim::simbackend
