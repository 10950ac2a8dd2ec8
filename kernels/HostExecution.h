// Boxed execution of ATen operators on device tensors: the CPU kernel runs on CPU tensors
// that alias the device memory, results that are new memory move to the device, and the
// operator's cost descriptor goes to the timing model. Operators with a cost model of
// their own are registered by name; every other operator reaches the fallback, which
// charges a generic cost and is listed by fallbackOperators().
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "KernelLaunch.h"

namespace cardsim::kernels {

// One call's arguments as the host kernel sees them: device tensors become CPU views
// (views of one device storage share one CPU storage), results move back to the device.
// Enforces CUDA's device rules: one card per call, CPU operands only as 0-dim scalars.
struct HostCall {
  std::vector<std::pair<at::Tensor, at::Tensor>> aliases;   // (device tensor, CPU alias)
  std::vector<at::Tensor> tensor_args;                      // device tensors, schema order
  std::set<const c10::TensorImpl*> written;                 // device tensors the op writes
  std::optional<c10::Device> cpu_seen;                      // a CPU operand met before any device one
  c10::DeviceIndex device = -1;
  bool writing = false;                                     // converting a written argument
  bool cpu_operands_allowed = false;                        // indexing takes CPU index tensors
  bool causal = false;                                      // the op's is_causal argument (attention's cost)
  const char* op_name = "";
  // One CPU storage per device storage, so ATen sees arguments that share memory as aliases.
  std::unordered_map<const c10::StorageImpl*, c10::Storage> host_storage;

  at::Tensor toHost(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) {
      // As on CUDA, only CPU scalars (0-dim tensors) may join device tensors in a kernel.
      if (t.defined() && t.dim() > 0 && !cpu_operands_allowed && device >= 0)
        TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                    "devices, ", c10::Device(c10::DeviceType::PrivateUse1, device), " and ", t.device(),
                    "! (in ", op_name, ")");
      if (t.defined() && t.dim() > 0 && !cpu_operands_allowed) cpu_seen = t.device();
      tensor_args.emplace_back();
      return t;
    }
    if (device < 0) {
      device = t.device().index();
      if (cpu_seen.has_value())
        TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                    "devices, ", t.device(), " and ", *cpu_seen, "! (in ", op_name, ")");
    }
    TORCH_CHECK(t.device().index() == device, "Expected all tensors to be on the same device, but "
                "found at least two devices, ", c10::Device(c10::DeviceType::PrivateUse1, device),
                " and ", t.device(), "! (in ", op_name, ")");
    auto [it, fresh] = host_storage.try_emplace(t.storage().unsafeGetStorageImpl());
    if (fresh) it->second = cpuAliasStorage(t);
    at::Tensor a = cpuAliasOver(it->second, t);
    aliases.emplace_back(t, a);
    tensor_args.push_back(t);
    if (writing) written.insert(t.unsafeGetTensorImpl());
    return a;
  }

  // A result of the CPU kernel, as a device tensor.
  at::Tensor toDevice(const at::Tensor& r) {
    if (!r.defined() || r.device().type() != c10::DeviceType::CPU) return r;
    for (const auto& [dev, a] : aliases)
      if (r.unsafeGetTensorImpl() == a.unsafeGetTensorImpl()) return dev;
    const void* data = r.storage().data();
    if (data)
      for (const auto& [dev, a] : aliases)
        if (a.storage().data() == data)   // a view of an argument: same device storage
          return tensorOver(dev.storage(), c10::DispatchKey::PrivateUse1, r);
    at::Tensor src = r.is_non_overlapping_and_dense() ? r : r.contiguous();
    at::Tensor d = at::empty_strided(src.sizes(), src.strides(),
                                     src.options().device(c10::DeviceType::PrivateUse1, device));
    // A result made in a lent block (ResultMemory.h) is usually in place already; else the
    // block it was lent may be the one taken, at another offset: memmove.
    if (src.numel() > 0 && d.data_ptr() != src.data_ptr()) std::memmove(d.data_ptr(), src.data_ptr(), src.nbytes());
    return d;
  }

  // Arguments the CPU kernel resized (out= tensors of the wrong shape) or re-strided.
  void syncWrittenArguments() {
    for (auto& [dev, a] : aliases) {
      const bool moved = a.storage().data() != dev.storage().data();
      if (!moved && a.sizes().equals(dev.sizes()) && a.strides().equals(dev.strides()) &&
          a.storage_offset() == dev.storage_offset())
        continue;
      if (moved) {
        dev.resize_(a.sizes());
        cpuAlias(dev).copy_(a);
      } else {
        dev.unsafeGetTensorImpl()->set_sizes_and_strides(a.sizes(), a.strides(), a.storage_offset());
      }
    }
  }
};

// Runs the operator on the stack through its CPU kernel on host views (or records it when
// the stream captures a graph) and queues its cost on the device's current stream.
void runOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The operators with unboxed device kernels of their own (DeviceKernels.cpp): the host
// executor does not register its boxed kernel for them.
bool isUnboxed(const char* name);

// Operators that ran through the generic fallback so far in this process, sorted.
std::vector<std::string> fallbackOperators();

// Operators registered with a cost model of their own.
std::vector<std::string> costedOperators();

}  // namespace cardsim::kernels
