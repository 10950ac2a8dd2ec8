// Cost descriptors computed from shapes and dtypes: what the timing model needs to know
// about a kernel (FLOPs, bytes read and written, data type, kernel class).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "cardsim/shim.h"

namespace cardsim::kernels {

enum class CostKind : uint8_t {
  Generic,        // an operator with no model of its own: every input read, every output written
  Elementwise,    // flops = output elements x factor
  Reduction,      // flops = input elements x factor
  Normalization,  // softmax / norms: flops = input elements x factor, reduction class
  Gemm,           // flops = 2 x output elements x K (+ output elements with a bias)
  Gather,         // embedding / index_select: reads what it writes plus the indices
};

struct OpCost {
  CostKind kind = CostKind::Generic;
  double flops_per_element = 1.0;
  int gemm_lhs_arg = 0;     // Gemm: the argument whose last dimension is K
  bool gemm_bias = false;   // Gemm: an added matrix (addmm, baddbmm)
};

// `inputs` are the tensor arguments (inputs and in-place/out targets), `outputs` the results.
shim::KernelCost estimateCost(const OpCost& op, const std::vector<at::Tensor>& inputs,
                              const std::vector<at::Tensor>& outputs, c10::DeviceIndex device);

double tensorBytes(const at::Tensor& t);

// An ATen operator overload with a cost model of its own ("add.Tensor").
struct CostedOp {
  const char* name;
  OpCost cost;
};
// The hot set of training and inference: functional, in-place and out= forms each listed.
const std::vector<CostedOp>& costedTable();

}  // namespace cardsim::kernels
