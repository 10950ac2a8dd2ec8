// Device kernels that cannot run through CPU views: allocation, views and metadata,
// copies between host and device or between devices, and reading a scalar back.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ops/_reshape_alias_cpu_dispatch.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_cpu_dispatch.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "CostModel.h"
#include "KernelLaunch.h"

namespace cardsim::kernels {
namespace {

constexpr auto kDev = c10::DeviceType::PrivateUse1;

c10::Device targetDevice(std::optional<c10::Device> device_opt) {
  c10::Device d = c10::device_or_default(device_opt);
  TORCH_CHECK(d.type() == kDev, "expected a device of the card, got ", d);
  if (!d.has_index())
    d = c10::Device(kDev, c10::impl::getDeviceGuardImpl(kDev)->getDevice().index());
  return d;
}

at::Tensor emptyMemoryFormat(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                             std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                             std::optional<bool> pin_memory,
                             std::optional<c10::MemoryFormat> memory_format) {
  const c10::Device d = targetDevice(device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "only strided tensors are supported on the card, got layout ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "device tensors cannot be pinned");
  c10::DeviceGuard guard(d);
  return at::detail::empty_generic(size, c10::GetAllocator(kDev), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor emptyStrided(c10::IntArrayRef size, c10::IntArrayRef stride,
                        std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                        std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  const c10::Device d = targetDevice(device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "only strided tensors are supported on the card");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "device tensors cannot be pinned");
  c10::DeviceGuard guard(d);
  return at::detail::empty_strided_generic(size, stride, c10::GetAllocator(kDev),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor asStrided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                     std::optional<int64_t> offset) {
  return at::cpu::as_strided(self, size, stride, offset);
}
at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) { return at::cpu::view(self, size); }
at::Tensor reshapeAlias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::cpu::_reshape_alias(self, size, stride);
}

const at::Tensor& resize(const at::Tensor& self, c10::IntArrayRef size,
                         std::optional<c10::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve,
                "unsupported memory format Preserve for resize_");
    impl->empty_tensor_restride(*memory_format);
  }
  const size_t need = at::detail::computeStorageNbytes(self.sizes(), self.strides(),
                                                       self.dtype().itemsize(),
                                                       self.storage_offset());
  if (self.numel() > 0 && need > self.storage().nbytes()) resizeStorage(self.storage(), need);
  return self;
}

at::Tensor& setStorage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                       c10::IntArrayRef stride) {
  return at::cpu::set_(self, source, offset, size, stride);
}
at::Tensor& setSource(at::Tensor& self, c10::Storage source) { return at::cpu::set_(self, source); }
at::Tensor& setTensor(at::Tensor& self, const at::Tensor& source) { return at::cpu::set_(self, source); }
at::Tensor& setEmpty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, c10::GetAllocator(kDev), true);
  return at::cpu::set_(self, storage, 0, {0}, {});
}

bool plainCopy(const at::Tensor& src, const at::Tensor& dst) {
  return src.is_contiguous() && dst.is_contiguous() && src.scalar_type() == dst.scalar_type() &&
         src.sizes().equals(dst.sizes()) && !src.is_conj() && !dst.is_conj() && !src.is_neg() &&
         !dst.is_neg();
}

void syncStream(c10::DeviceIndex device) {
  onHostSync("a blocking copy");
  c10::DeviceGuard guard(c10::Device(kDev, device));
  throwIfFailed(shim::streamSynchronize(currentStream(device)), "synchronize after a copy");
}

// Elementwise copy between two tensors of one device (strides, broadcast, dtype change).
// The current stream of `waiter` waits for the work queued so far on the current stream of `producer`.
void streamWaitsFor(c10::DeviceIndex waiter, c10::DeviceIndex producer) {
  shim::Event e = nullptr;
  throwIfFailed(shim::eventCreate(&e, shim::kEventDisableTiming), "copy between devices (event)");
  {
    c10::DeviceGuard g(c10::Device(kDev, producer));
    throwIfFailed(shim::eventRecord(e, currentStream(producer)), "copy between devices (event record)");
  }
  {
    c10::DeviceGuard g(c10::Device(kDev, waiter));
    throwIfFailed(shim::streamWaitEvent(currentStream(waiter), e), "copy between devices (event wait)");
  }
  (void)shim::eventDestroy(e);
}

void deviceCopyKernel(const at::Tensor& src, const at::Tensor& dst) {
  shim::KernelCost cost;
  cost.kernel_class = shim::KernelClass::Elementwise;
  cost.dtype = costDtype(dst.scalar_type(), dst.device().index());
  cost.bytes_read = static_cast<double>(dst.numel()) * src.element_size();
  cost.bytes_written = tensorBytes(dst);
  // Views of one storage share one host storage, so ATen rejects partial overlaps as on the CPU.
  const c10::Storage hs = cpuAliasStorage(src);
  at::Tensor s = cpuAliasOver(hs, src);
  at::Tensor d = dst.storage().is_alias_of(src.storage()) ? cpuAliasOver(hs, dst) : cpuAlias(dst);
  launch(dst.device().index(), "aten::copy_", cost, [s, d]() mutable { d.copy_(s); }, {&src, &dst});
}

// The runtime's device of a card tensor's memory.
int runtimeDeviceOf(const at::Tensor& t) {
  shim::PointerAttributes attr;
  throwIfFailed(shim::pointerGetAttributes(&attr, t.data_ptr()), "copy between devices");
  return attr.device;
}

at::Tensor copyFrom(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) return dst;
  const at::Tensor src = self.sizes().equals(dst.sizes()) ? self : self.expand_as(dst);
  const bool src_dev = src.device().type() == kDev;
  const bool dst_dev = dst.device().type() == kDev;
  if (src_dev && dst_dev) {
    const auto sd = src.device().index(), dd = dst.device().index();
    c10::DeviceGuard guard(dst.device());
    if (sd == dd) {
      // A captured copy is a kernel, so the graph holds both tensors' memory.
      if (plainCopy(src, dst) && !src.storage().is_alias_of(dst.storage()) &&
          !isCapturing(currentStream(dd)))
        throwIfFailed(shim::memcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                                        shim::MemcpyKind::DeviceToDevice, currentStream(dd)),
                      "copy between device tensors");
      else
        deviceCopyKernel(src, dst);
    } else {
      // Across devices: make it contiguous and of the target type on the source card,
      // move the bytes over the link, lay them out on the target card.
      at::Tensor packed = src;
      if (!plainCopy(src, dst)) {
        packed = at::empty(src.sizes(), src.options().dtype(dst.scalar_type()));
        deviceCopyKernel(src, packed);
      }
      at::Tensor landed = dst.is_contiguous() ? dst : at::empty_like(dst, at::MemoryFormat::Contiguous);
      // A two-way barrier, as CUDA's copy_ between devices has: the copy (queued on the
      // target's stream) follows the work queued on the source's stream before it, and the
      // source's later work follows the copy.
      streamWaitsFor(dd, sd);
      // The runtime numbers devices physically; torch's indices are the visible ones
      // (MLU_VISIBLE_DEVICES=1,2 makes chip 1 mlu:0), so ask the runtime whose memory it is.
      throwIfFailed(shim::memcpyPeerAsync(landed.data_ptr(), runtimeDeviceOf(landed), packed.data_ptr(),
                                          runtimeDeviceOf(packed), landed.nbytes(), currentStream(dd)),
                    "copy between devices");
      streamWaitsFor(sd, dd);
      if (!landed.is_same(dst)) deviceCopyKernel(landed, dst);
      if (!non_blocking) syncStream(dd);
    }
    return dst;
  }
  if (dst_dev) {   // host -> device
    const auto dd = dst.device().index();
    c10::DeviceGuard guard(dst.device());
    const shim::Stream stream = currentStream(dd);
    const bool as_is = src.scalar_type() == dst.scalar_type() && src.is_contiguous() &&
                       !src.is_conj() && !src.is_neg();
    at::Tensor host = src;
    if (!as_is && isCapturing(stream)) {
      // A graph replays this copy later: it owns a pinned staging buffer, and laying the
      // source out into it is a host node, so each replay reads the source as it is then.
      host = at::empty(dst.sizes(), dst.options().device(at::kCPU).pinned_memory(true));
      throwIfFailed(shim::launchHostFunc(stream, [host, src]() mutable { host.copy_(src); }),
                    "copy from host to device (staging in a graph)");
    } else if (!as_is) {
      host = src.to(dst.scalar_type()).contiguous().resolve_conj().resolve_neg();
    }
    at::Tensor landed = dst.is_contiguous() ? dst : at::empty_like(dst, at::MemoryFormat::Contiguous);
    throwIfFailed(shim::memcpyAsync(landed.data_ptr(), host.data_ptr(), landed.nbytes(),
                                    shim::MemcpyKind::HostToDevice, stream),
                  "copy from host to device");
    if (!landed.is_same(dst)) deviceCopyKernel(landed, dst);
    if (!non_blocking) syncStream(dd);
    return dst;
  }
  // device -> host
  const auto sd = src.device().index();
  if (timingMode()) noteHostRead(static_cast<double>(dst.nbytes()));
  c10::DeviceGuard guard(src.device());
  at::Tensor packed = src;
  if (src.scalar_type() != dst.scalar_type() || !src.is_contiguous() || src.is_conj() || src.is_neg()) {
    packed = at::empty(src.sizes(), src.options().dtype(dst.scalar_type()));
    deviceCopyKernel(src, packed);   // lays out, converts and resolves conj/neg on the card
  }
  const shim::Stream stream = currentStream(sd);
  const bool direct = dst.is_contiguous() && !dst.is_conj() && !dst.is_neg();
  const bool capturing = !direct && isCapturing(stream);
  // In a graph the staging buffer is the graph's and the host-side layout is a host node
  // after the copy, so each replay updates the destination.
  at::Tensor landed = direct ? dst : at::empty(dst.sizes(), dst.options().pinned_memory(capturing));
  throwIfFailed(shim::memcpyAsync(landed.data_ptr(), packed.data_ptr(), landed.nbytes(),
                                  shim::MemcpyKind::DeviceToHost, stream),
                "copy from device to host");
  if (capturing)
    throwIfFailed(shim::launchHostFunc(stream, [landed, dst]() mutable { dst.copy_(landed); }),
                  "copy from device to host (layout in a graph)");
  else if (!direct)
    dst.copy_(landed);
  if (!non_blocking) syncStream(sd);
  return dst;
}

at::Tensor copyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  if (!dst.sizes().equals(self.sizes())) dst.resize_(self.sizes());
  return copyFrom(self, dst, false);
}

at::Scalar localScalarDense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  at::Tensor host = at::empty(self.sizes(), self.options().device(at::kCPU));
  copyFrom(self, host, false);
  return host.item();
}

// Whether `self` may take `from`'s data in place (`param.data = t`, and so whether
// `module.to(device)` keeps its Parameter objects). ATen's rule knows only its own dense
// backends; the card's tensors are dense strided tensors like CUDA's, so a CPU tensor and a
// device tensor are interchangeable here as CPU and CUDA tensors are.
bool hasCompatibleShallowCopyType(const at::Tensor& self, const at::Tensor& from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) return true;
  auto dense = [](const at::Tensor& t) {
    const c10::DispatchKeySet ks = t.key_set();
    return ks.has(c10::DispatchKey::Dense) &&
           ks.has_any(c10::DispatchKeySet({c10::BackendComponent::CPUBit,
                                           c10::BackendComponent::PrivateUse1Bit}));
  };
  return dense(self) && dense(from);
}

// Marks the tensor's memory as used by `stream`: the allocator reuses it only after the
// stream has reached this point.
void recordStream(at::Tensor& self, c10::Stream stream) {
  c10::impl::getDeviceGuardImpl(kDev)->recordDataPtrOnStream(self.storage().data_ptr(), stream);
}

}  // namespace
}  // namespace cardsim::kernels

// Copies resolve conjugate and negative bits themselves (the host kernel sees them on its
// views); going through those fallbacks would recurse (they clone, which copies).
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace cardsim::kernels;
  m.impl("empty.memory_format", TORCH_FN(emptyMemoryFormat));
  m.impl("empty_strided", TORCH_FN(emptyStrided));
  m.impl("as_strided", TORCH_FN(asStrided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshapeAlias));
  // Views of the same storage, as on CPU (torch.distributed hands complex tensors to the
  // backends as their real views): no kernel, no device time.
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("resize_", TORCH_FN(resize));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(setStorage));
  m.impl("set_.source_Storage", TORCH_FN(setSource));
  m.impl("set_.source_Tensor", TORCH_FN(setTensor));
  m.impl("set_", TORCH_FN(setEmpty));
  m.impl("_copy_from", TORCH_FN(copyFrom));
  m.impl("_copy_from_and_resize", TORCH_FN(copyFromAndResize));
  m.impl("_local_scalar_dense", TORCH_FN(localScalarDense));
  m.impl("record_stream", TORCH_FN(recordStream));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(hasCompatibleShallowCopyType));
}
