// Which kernel scaled_dot_product_attention runs on the card. A backend that makes no
// choice gets ATen's math composite: the scores as a matrix in memory, then softmax and two
// batched products, each a kernel of its own (2-3x the CPU's fused kernel in wall time, and
// the wrong shape on the timeline: the cards' libraries have fused attention). The card
// chooses as the CPU does, honouring the user's switches (torch.nn.attention.sdpa_kernel,
// torch.backends.cuda.enable_flash_sdp); where that is flash attention, ATen's composite
// calls _scaled_dot_product_flash_attention_for_cpu (and its backward), which the host
// executor runs on host views and times as one attention kernel (CostKind::Attention).
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_native.h>

namespace cardsim::kernels {
namespace {
int64_t fusedSdpChoice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                       const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                       std::optional<double> scale, bool enable_gqa) {
  // Shapes, dtypes, strides and the global switches only: no tensor data is read.
  return at::native::_fused_sdp_choice_cpp(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                           enable_gqa);
}
}  // namespace
}  // namespace cardsim::kernels

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &cardsim::kernels::fusedSdpChoice)
}  // namespace at::native
