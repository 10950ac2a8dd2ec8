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
  Attention,      // fused (flash) attention: the two products over the unmasked score pairs
};

struct OpCost {
  CostKind kind = CostKind::Generic;
  double flops_per_element = 1.0;
  int gemm_lhs_arg = 0;     // Gemm: the argument whose last dimension is K;
                            // Attention: the query's (key and value follow it)
  bool gemm_bias = false;   // Gemm: an added matrix (addmm, baddbmm)
  bool out_form = false;    // an out= overload: its out arguments are written, not read
};

// `inputs` are the tensor arguments in schema order (inputs and in-place/out targets),
// `outputs` the results. An in-place target is read and written; the out arguments of an
// out= form (`op.out_form`: the last occurrence among the inputs of each result) only
// written. An fp32 GEMM is timed as TF32 where PyTorch would use TF32 on CUDA
// (`matmulUsesTf32`). `causal`: an attention kernel's is_causal argument (the masked
// half of the score pairs is skipped, as fused kernels do).
shim::KernelCost estimateCost(const OpCost& op, const std::vector<at::Tensor>& inputs,
                              const std::vector<at::Tensor>& outputs, c10::DeviceIndex device,
                              bool causal = false);

// The operand shapes (inputs, then outputs) of the kernel about to be launched on this
// thread, for a trace being recorded (nothing happens otherwise). estimateCost calls it.
// By ArrayRef: a braced list at a call costs no heap allocation.
void noteOperandShapes(c10::ArrayRef<at::Tensor> inputs, c10::ArrayRef<at::Tensor> outputs);

// True when an fp32 matmul on `device` runs as TF32: the card has TF32 units and PyTorch's
// fp32 matmul precision for CUDA is TF32 (torch.backends.cuda.matmul.allow_tf32,
// torch.set_float32_matmul_precision("high" or "medium"), or fp32_precision = "tf32" on
// torch.backends.cuda.matmul or inherited from torch.backends).
bool matmulUsesTf32(c10::DeviceIndex device);

double tensorBytes(const at::Tensor& t);

// An ATen operator overload with a cost model of its own ("add.Tensor").
struct CostedOp {
  const char* name;
  OpCost cost;
};
// The hot set of training and inference: functional, in-place and out= forms each listed.
const std::vector<CostedOp>& costedTable();

}  // namespace cardsim::kernels
