// Automatic mixed precision for the device: torch.autocast(device_type="mlu"/"supa") casts
// with the same policy lists as CUDA's (lower precision for matmuls and convolutions, fp32
// for losses and norms, promotion for mixed-input ops).
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace at::autocast {
namespace {

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define CARDSIM_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define CARDSIM_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define CARDSIM_FP32_OPT(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define CARDSIM_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(CARDSIM_LOWER)
  AT_FORALL_FP32(CARDSIM_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(CARDSIM_FP32_OPT)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(CARDSIM_PROMOTE)
#undef CARDSIM_LOWER
#undef CARDSIM_FP32
#undef CARDSIM_FP32_OPT
#undef CARDSIM_PROMOTE
}

}  // namespace
}  // namespace at::autocast
