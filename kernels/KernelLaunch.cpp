#include "KernelLaunch.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <mutex>

namespace cardsim::kernels {

void throwIfFailed(const shim::Status& s, const char* what) {
  if (s.ok()) return;
  const std::string msg = std::string(what) + ": " + s.toString();
  switch (s.code()) {
    case shim::Code::OutOfMemory: TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    case shim::Code::InvalidValue: TORCH_CHECK_VALUE(false, msg);
    // torch.distributed.DistBackendError, what c10d's own backends raise for a failed collective
    case shim::Code::CommFailed: TORCH_CHECK_WITH(DistBackendError, false, msg);
    default: TORCH_CHECK(false, msg);
  }
}

shim::Stream currentStream(c10::DeviceIndex device) {
  const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1);
  const c10::Stream s = impl->getStream(c10::Device(c10::DeviceType::PrivateUse1, device));
  return static_cast<shim::Stream>(impl->getStreamNativeHandle(s));
}

c10::Storage cpuAliasStorage(const at::Tensor& t) {
  const c10::Storage& st = t.storage();
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), st.sym_nbytes(),
      at::DataPtr(const_cast<void*>(st.data()), at::Device(at::kCPU)), c10::GetCPUAllocator(),
      /*resizable=*/true));
}

at::Tensor cpuAlias(const at::Tensor& t) { return cpuAliasOver(cpuAliasStorage(t), t); }

at::Tensor tensorOver(const c10::Storage& storage, c10::DispatchKey key, const at::Tensor& like) {
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(storage), c10::DispatchKeySet(key),
                                                          like.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  return t;
}

at::Tensor cpuAliasOver(const c10::Storage& host_storage, const at::Tensor& t) {
  at::Tensor a = tensorOver(host_storage, c10::DispatchKey::CPU, t);
  if (t.is_conj()) a._set_conj(true);
  if (t.is_neg()) a._set_neg(true);
  return a;
}

namespace {
// Per device: does the card have fp64 units? Read once from its properties.
constexpr int kMaxDevices = 64;
std::array<std::atomic<int>, kMaxDevices> g_has_fp64{};  // 0 unknown, 1 yes, 2 no

bool hasFp64(c10::DeviceIndex device) {
  if (device < 0 || device >= kMaxDevices) return true;
  int v = g_has_fp64[device].load(std::memory_order_relaxed);
  if (v == 0) {
    // The guard maps torch's (visible) index to the physical one; the preset is the same
    // for every device of the process, so the properties of any device answer.
    shim::DeviceProperties p;
    v = (shim::getDeviceProperties(&p, 0).ok() && p.peak_fp64_flops <= 0) ? 2 : 1;
    g_has_fp64[device].store(v, std::memory_order_relaxed);
  }
  return v == 1;
}
}  // namespace

shim::DataType costDtype(at::ScalarType t, c10::DeviceIndex device) {
  switch (t) {
    case at::kDouble:
    case at::kComplexDouble:
      return hasFp64(device) ? shim::DataType::Float64 : shim::DataType::Float32;
    case at::kHalf: return shim::DataType::Float16;
    case at::kBFloat16: return shim::DataType::BFloat16;
    default: return shim::DataType::Float32;
  }
}

double flopScale(at::ScalarType t, c10::DeviceIndex device) {
  if ((t == at::kDouble || t == at::kComplexDouble) && !hasFp64(device)) return 4.0;
  return 1.0;
}

void resizeStorage(const c10::Storage& storage, size_t nbytes) {
  c10::StorageImpl* st = storage.unsafeGetStorageImpl();
  TORCH_CHECK(st->resizable(), "trying to resize storage that is not resizable");
  c10::DeviceGuard guard(storage.device());
  c10::Allocator* alloc = st->allocator() ? st->allocator() : c10::GetAllocator(c10::DeviceType::PrivateUse1);
  at::DataPtr fresh = alloc->allocate(nbytes);
  const size_t keep = std::min(nbytes, st->nbytes());
  const shim::Stream stream = currentStream(storage.device().index());
  if (keep > 0 && st->data())
    throwIfFailed(shim::memcpyAsync(fresh.get(), st->data(), keep, shim::MemcpyKind::DeviceToDevice, stream),
                  "resize");
  if (keep > 0 && st->data() && isCapturing(stream)) {
    // The captured copy reads the old block at every replay: the graph keeps it (and the
    // new one, which the copy writes) so that neither is reused while the graph lives.
    auto blocks = std::make_shared<std::pair<at::DataPtr, c10::Storage>>(st->set_data_ptr(std::move(fresh)),
                                                                         storage);
    throwIfFailed(shim::launchHostFunc(stream, [blocks] {}), "resize (in a graph)");
    st->set_nbytes(nbytes);
    return;
  }
  st->set_data_ptr_noswap(std::move(fresh));
  st->set_nbytes(nbytes);
}

bool isCapturing(shim::Stream stream) {
  bool capturing = false;
  if (!stream) return false;   // the default stream cannot capture
  throwIfFailed(shim::streamIsCapturing(stream, &capturing), "streamIsCapturing");
  return capturing;
}

namespace {
std::mutex g_reads_mutex;
std::vector<HostReadSite> g_reads;
std::string (*g_site_fn)() = nullptr;
}  // namespace

void setHostReadSiteFn(std::string (*site_fn)()) { g_site_fn = site_fn; }

void noteHostRead(double bytes) {
  const std::string site = g_site_fn ? g_site_fn() : std::string("(unknown site)");
  std::lock_guard<std::mutex> lock(g_reads_mutex);
  for (HostReadSite& r : g_reads)
    if (r.site == site) {
      ++r.count;
      r.bytes += bytes;
      return;
    }
  g_reads.push_back(HostReadSite{site, 1, bytes});
}

std::vector<HostReadSite> hostReads() {
  std::lock_guard<std::mutex> lock(g_reads_mutex);
  return g_reads;
}

namespace {
std::atomic<int> g_sync_debug{0};
}  // namespace

void setSyncDebugMode(int mode) {
  TORCH_CHECK_VALUE(mode >= 0 && mode <= 2, "invalid sync debug mode ", mode, " (0: default, 1: warn, 2: error)");
  g_sync_debug = mode;
}

int syncDebugMode() { return g_sync_debug; }

void onHostSync(const char* what) {
  const int mode = g_sync_debug.load(std::memory_order_relaxed);
  if (mode == 0) return;
  const std::string device = c10::get_privateuse1_backend();
  if (mode == 1) {
    TORCH_WARN("called a synchronizing ", device, " operation (", what, ")");
    return;
  }
  TORCH_CHECK(false, "called a synchronizing ", device, " operation (", what, ")");
}

bool timingMode() {
  static const bool timing = [] {
    shim::ExecutionMode m = shim::ExecutionMode::Full;
    throwIfFailed(shim::getExecutionMode(&m), "execution mode");
    return m == shim::ExecutionMode::Timing;
  }();
  return timing;
}

void launch(c10::DeviceIndex device, const char* name, const shim::KernelCost& cost,
            const std::function<void()>& work, c10::ArrayRef<const at::Tensor*> touched) {
  shim::Stream stream = currentStream(device);
  if (isCapturing(stream)) {
    std::vector<c10::Storage> held;
    for (const at::Tensor* t : touched)
      if (t->defined() && t->device().type() == c10::DeviceType::PrivateUse1) held.push_back(t->storage());
    throwIfFailed(shim::launchKernel(stream, name, cost, [work, held] { work(); }), name);
    return;
  }
  if (work && !timingMode()) {
    HostWindow window;
    work();
  }
  throwIfFailed(shim::launchKernel(stream, name, cost, nullptr), name);
}

}  // namespace cardsim::kernels
