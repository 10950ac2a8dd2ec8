#include "CostModel.h"

#include "KernelLaunch.h"

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
}  // namespace

shim::KernelCost estimateCost(const OpCost& op, const std::vector<at::Tensor>& inputs,
                              const std::vector<at::Tensor>& outputs, c10::DeviceIndex device) {
  shim::KernelCost c;
  const at::ScalarType t = computeType(inputs, outputs);
  c.dtype = costDtype(t, device);
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
  }
  c.flops = flops * flopScale(t, device);
  return c;
}

}  // namespace cardsim::kernels
