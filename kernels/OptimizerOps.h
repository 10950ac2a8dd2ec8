// DeepSpeed's fused optimizer kernels with the exact argument lists its op builders use:
// fused_adam (MLU builder), multi_tensor_adam, multi_tensor_lion and lamb (SUPA builders).
#pragma once

#include <string>

namespace cardsim::kernels {

// Defines `<ns>::fused_adam` (13 arguments, DeepSpeed's MLU builder). Idempotent.
void registerFusedAdam(const std::string& ns);
// Defines `deepspeed::multi_tensor_adam`, `multi_tensor_lion` and `lamb`. Idempotent.
void registerDeepSpeedOps();

}  // namespace cardsim::kernels
