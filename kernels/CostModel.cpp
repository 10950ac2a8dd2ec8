#include "CostModel.h"

#include <ATen/Context.h>

#include <algorithm>
#include <array>
#include <atomic>

#include "KernelLaunch.h"
#include "cardsim/trace.h"

namespace cardsim::kernels {

double tensorBytes(const at::Tensor& t) {
  return t.defined() ? static_cast<double>(t.numel()) * static_cast<double>(t.element_size()) : 0.0;
}

namespace {
double elements(const std::vector<at::Tensor>& ts) {
  double n = 0;
  for (const auto& t : ts) n += t.defined() ? static_cast<double>(t.numel()) : 0.0;
  return n;
}
double bytes(const std::vector<at::Tensor>& ts) {
  double b = 0;
  for (const auto& t : ts) b += tensorBytes(t);
  return b;
}
// The widest floating type among the tensors decides the arithmetic's data type.
at::ScalarType computeType(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
  auto pick = [](at::ScalarType a, at::ScalarType b) {
    auto rank = [](at::ScalarType t) {
      switch (t) {
        case at::kDouble: case at::kComplexDouble: return 4;
        case at::kFloat: case at::kComplexFloat: return 3;
        case at::kBFloat16: return 2;
        case at::kHalf: return 1;
        default: return 0;
      }
    };
    return rank(b) > rank(a) ? b : a;
  };
  at::ScalarType t = at::kByte;
  for (const auto& x : outputs) if (x.defined()) t = pick(t, x.scalar_type());
  if (t == at::kByte)
    for (const auto& x : inputs) if (x.defined()) t = pick(t, x.scalar_type());
  return t;
}

// The tensors an out= form reads: its inputs without its out arguments (the last
// occurrence of each result: out arguments come last in the schema).
std::vector<at::Tensor> withoutOutArguments(const std::vector<at::Tensor>& inputs,
                                            const std::vector<at::Tensor>& outputs) {
  std::vector<bool> dropped(inputs.size(), false);
  for (const auto& out : outputs) {
    if (!out.defined()) continue;
    for (size_t i = inputs.size(); i-- > 0;)
      if (!dropped[i] && inputs[i].defined() && inputs[i].is_same(out)) {
        dropped[i] = true;
        break;
      }
  }
  std::vector<at::Tensor> read;
  read.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!dropped[i]) read.push_back(inputs[i]);
  return read;
}

// Q K^T and P V of a fused attention kernel: 2 (E + Ev) per unmasked (query, key) pair of
// each batch and head. A causal mask (top-left aligned, as PyTorch's is_causal) leaves query
// i the keys 0..i. The score matrix never reaches memory: bytes are the operands' alone.
double attentionFlops(const std::vector<at::Tensor>& inputs, int query_arg, bool causal) {
  const size_t q = static_cast<size_t>(query_arg);
  if (q + 2 >= inputs.size()) return 0;
  const at::Tensor &query = inputs[q], &key = inputs[q + 1], &value = inputs[q + 2];
  if (!query.defined() || !key.defined() || !value.defined() || query.dim() < 2 || key.dim() < 2 ||
      value.dim() < 1 || query.numel() == 0)
    return 0;
  const double l = static_cast<double>(query.size(-2)), s = static_cast<double>(key.size(-2));
  const double e = static_cast<double>(query.size(-1)), ev = static_cast<double>(value.size(-1));
  const double batch_heads = static_cast<double>(query.numel()) / (l * e);
  // Rows below the diagonal see i + 1 keys until the keys run out: sum of min(i + 1, s).
  double pairs = l * s;
  if (causal) {
    const double full = std::max(0.0, l - s);   // rows that see every key
    const double partial = std::min(l, s);      // rows 0..partial-1 see 1..partial keys
    pairs = partial * (partial + 1) / 2 + full * s;
  }
  return 2.0 * batch_heads * pairs * (e + ev);
}

// Per device: does the card have TF32 units? Read once from its properties.
constexpr int kMaxDevices = 64;
std::array<std::atomic<int>, kMaxDevices> g_has_tf32{};  // 0 unknown, 1 yes, 2 no

bool hasTf32(c10::DeviceIndex device) {
  if (device < 0 || device >= kMaxDevices) return false;
  int v = g_has_tf32[device].load(std::memory_order_relaxed);
  if (v == 0) {
    // One preset for every device of the process: any device's properties answer.
    shim::DeviceProperties p;
    if (!shim::getDeviceProperties(&p, 0).ok()) return false;
    v = p.peak_tf32_flops > 0 ? 1 : 2;
    g_has_tf32[device].store(v, std::memory_order_relaxed);
  }
  return v == 1;
}
}  // namespace

bool matmulUsesTf32(c10::DeviceIndex device) {
  // float32Precision resolves all three APIs (the legacy allow_tf32 flag and
  // set_float32_matmul_precision set it; "none" inherits from torch.backends) without the
  // error allowTF32CuBLAS() raises when a program mixes them.
  return hasTf32(device) &&
         at::globalContext().float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL) ==
             at::Float32Precision::TF32;
}

shim::KernelCost estimateCost(const OpCost& op, const std::vector<at::Tensor>& all_inputs,
                              const std::vector<at::Tensor>& outputs, c10::DeviceIndex device,
                              bool causal) {
  shim::KernelCost c;
  std::vector<at::Tensor> read;
  if (op.out_form) read = withoutOutArguments(all_inputs, outputs);
  const std::vector<at::Tensor>& inputs = op.out_form ? read : all_inputs;
  const at::ScalarType t = computeType(inputs, outputs);
  c.dtype = costDtype(t, device);
  if ((op.kind == CostKind::Gemm || op.kind == CostKind::Attention) && t == at::kFloat &&
      matmulUsesTf32(device))
    c.dtype = shim::DataType::TFloat32;
  c.bytes_read = bytes(inputs);
  c.bytes_written = bytes(outputs);
  const double out_elems = elements(outputs);
  double flops = 0;
  switch (op.kind) {
    case CostKind::Generic:
      c.kernel_class = shim::KernelClass::Other;
      flops = out_elems;
      break;
    case CostKind::Elementwise:
      c.kernel_class = shim::KernelClass::Elementwise;
      flops = out_elems * op.flops_per_element;
      break;
    case CostKind::Reduction:
    case CostKind::Normalization:
      c.kernel_class = shim::KernelClass::Reduction;
      flops = elements(inputs) * op.flops_per_element;
      break;
    case CostKind::Gemm: {
      c.kernel_class = shim::KernelClass::Gemm;
      double k = 1;
      if (op.gemm_lhs_arg >= 0 && op.gemm_lhs_arg < static_cast<int>(inputs.size()) &&
          inputs[op.gemm_lhs_arg].defined() && inputs[op.gemm_lhs_arg].dim() > 0)
        k = static_cast<double>(inputs[op.gemm_lhs_arg].size(-1));
      flops = 2.0 * out_elems * k + (op.gemm_bias ? out_elems : 0.0);
      break;
    }
    case CostKind::Gather: {
      c.kernel_class = shim::KernelClass::Other;
      // Only the gathered rows are read, not the whole table: rows out + the indices.
      double index_bytes = 0;
      for (const auto& x : inputs)
        if (x.defined() && !at::isFloatingType(x.scalar_type()) && !at::isComplexType(x.scalar_type()))
          index_bytes += tensorBytes(x);
      c.bytes_read = c.bytes_written + index_bytes;
      flops = 0;
      break;
    }
    case CostKind::Attention:
      c.kernel_class = shim::KernelClass::Gemm;
      flops = attentionFlops(inputs, op.gemm_lhs_arg, causal) * op.flops_per_element;
      break;
  }
  c.flops = flops * flopScale(t, device);
  noteOperandShapes(inputs, outputs);
  return c;
}

void noteOperandShapes(c10::ArrayRef<at::Tensor> inputs, c10::ArrayRef<at::Tensor> outputs) {
  if (!shim::traceRecording()) return;   // only a trace keeps them
  std::vector<std::vector<int64_t>> shapes;
  shapes.reserve(inputs.size() + outputs.size());
  uint32_t outs = 0;
  for (const auto* list : {&inputs, &outputs})
    for (const at::Tensor& x : *list) {
      if (!x.defined()) continue;
      shapes.emplace_back(x.sizes().begin(), x.sizes().end());
      outs += list == &outputs;
    }
  shim::traceNextKernelShapes(std::move(shapes), outs);
}

}  // namespace cardsim::kernels
