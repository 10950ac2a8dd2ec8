// The operators with a cost model of their own, and which model: the table the host
// executor registers its kernels from.
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "CostModel.h"

namespace cardsim::kernels {
namespace {

// Whether the overload ("add.out") has out arguments, the kwarg-only tensors it writes
// (`*, Tensor(a!) out`): they are written, not read. Asked of the schema, not the name,
// since out forms are named out, Tensor_out, grad_input, values, dim_max, output, ...
bool hasOutArguments(const std::string& name) {
  const size_t dot = name.find('.');
  const c10::OperatorName op{"aten::" + name.substr(0, dot),
                             dot == std::string::npos ? "" : name.substr(dot + 1)};
  const auto handle = c10::Dispatcher::singleton().findSchema(op);
  if (!handle) return false;
  const auto& args = handle->schema().arguments();
  return std::any_of(args.begin(), args.end(), [](const c10::Argument& a) { return a.is_out(); });
}

using Kind = CostKind;

OpCost ew(double f = 1) { return {Kind::Elementwise, f, 0, false}; }
OpCost red(double f = 1) { return {Kind::Reduction, f, 0, false}; }
OpCost norm(double f) { return {Kind::Normalization, f, 0, false}; }
OpCost gemm(int lhs, bool bias) { return {Kind::Gemm, 1, lhs, bias}; }
OpCost gather() { return {Kind::Gather, 0, 0, false}; }
OpCost attention(int query_arg, double pass_factor) { return {Kind::Attention, pass_factor, query_arg, false}; }

// The operators with a cost model of their own (the hot set of training and inference).
// Functional forms, in-place forms and out= forms each have their own registration.
}  // namespace

const std::vector<CostedOp>& costedTable() {
  static const std::vector<CostedOp> table = [] {
    std::vector<CostedOp> t;
    auto family = [&](const char* base, std::initializer_list<const char*> overloads, OpCost c) {
      for (const char* o : overloads) {
        std::string n = std::string(base) + (*o ? std::string(".") + o : std::string());
        OpCost cost = c;
        cost.out_form = hasOutArguments(n);
        t.push_back({strdup(n.c_str()), cost});   // lives as long as the registrations
      }
    };
    auto variants = [&](const char* base, OpCost c) {
      family(base, {"", "out"}, c);
      family((std::string(base) + "_").c_str(), {""}, c);
    };
    // Elementwise arithmetic.
    for (const char* b : {"add", "sub", "mul", "div"}) {
      family(b, {"Tensor", "out"}, ew());
      family((std::string(b) + "_").c_str(), {"Tensor"}, ew());
    }
    family("div", {"Tensor_mode", "out_mode"}, ew());
    family("div_", {"Tensor_mode"}, ew());
    for (const char* b : {"neg", "abs", "reciprocal", "sign", "sqrt", "rsqrt", "floor", "ceil",
                          "round", "trunc", "frac"})
      variants(b, ew());
    for (const char* b : {"exp", "log", "log1p", "expm1", "sigmoid", "tanh", "erf", "sin", "cos"})
      variants(b, ew(4));
    family("pow", {"Tensor_Scalar", "Tensor_Scalar_out", "Tensor_Tensor", "Tensor_Tensor_out"}, ew(4));
    family("pow_", {"Scalar", "Tensor"}, ew(4));
    family("relu", {""}, ew());
    family("relu_", {""}, ew());
    family("gelu", {"", "out"}, ew(8));
    family("gelu_", {""}, ew(8));
    family("gelu_backward", {"", "grad_input"}, ew(10));
    family("silu", {"", "out"}, ew(4));
    family("silu_", {""}, ew(4));
    family("silu_backward", {"", "grad_input"}, ew(6));
    family("threshold_backward", {"", "grad_input"}, ew());
    family("sigmoid_backward", {"", "grad_input"}, ew(2));
    family("tanh_backward", {"", "grad_input"}, ew(2));
    family("where", {"self", "self_out"}, ew());
    family("masked_fill_", {"Scalar", "Tensor"}, ew());
    family("fill_", {"Scalar", "Tensor"}, ew(0));
    family("zero_", {""}, ew(0));
    family("clamp", {"", "out", "Tensor", "Tensor_out"}, ew());
    family("clamp_", {"", "Tensor"}, ew());
    family("clamp_min", {"", "out"}, ew());
    family("clamp_max", {"", "out"}, ew());
    family("maximum", {"", "out"}, ew());
    family("minimum", {"", "out"}, ew());
    for (const char* b : {"eq", "ne", "lt", "le", "gt", "ge"}) {
      family(b, {"Tensor", "Scalar", "Tensor_out", "Scalar_out"}, ew());
      family((std::string(b) + "_").c_str(), {"Tensor", "Scalar"}, ew());
    }
    family("addcmul", {"", "out"}, ew(2));
    family("addcmul_", {""}, ew(2));
    family("addcdiv", {"", "out"}, ew(2));
    family("addcdiv_", {""}, ew(2));
    family("lerp", {"Scalar", "Tensor", "Scalar_out", "Tensor_out"}, ew(2));
    family("lerp_", {"Scalar", "Tensor"}, ew(2));
    family("logical_not", {"", "out"}, ew());
    for (const char* b : {"logical_and", "logical_or", "logical_xor"}) {
      family(b, {"", "out"}, ew());
      family((std::string(b) + "_").c_str(), {""}, ew());
    }
    for (const char* b : {"bitwise_and", "bitwise_or", "bitwise_xor"}) {
      family(b, {"Tensor", "Tensor_out", "Scalar", "Scalar_out"}, ew());
      family((std::string(b) + "_").c_str(), {"Tensor", "Scalar"}, ew());
    }
    family("bitwise_not", {"", "out"}, ew());
    family("bitwise_not_", {""}, ew());
    family("isnan", {""}, ew());
    family("isinf", {""}, ew());
    family("isneginf", {"", "out"}, ew());
    family("isposinf", {"", "out"}, ew());
    for (const char* b : {"leaky_relu", "hardtanh", "elu", "softplus", "hardswish", "hardsigmoid", "mish"})
      family(b, {"", "out"}, ew(4));
    for (const char* b : {"leaky_relu_", "hardtanh_", "elu_", "hardswish_", "hardsigmoid_", "mish_"})
      family(b, {""}, ew(4));
    family("_fused_adam_", {""}, ew(12));
    family("_fused_adamw_", {""}, ew(12));
    family("bernoulli_", {"float", "Tensor"}, ew(2));
    family("native_dropout", {""}, ew(3));
    family("native_dropout_backward", {""}, ew(2));
    family("_foreach_add_", {"Scalar", "List", "ScalarList", "Tensor"}, ew());
    family("_foreach_add", {"Scalar", "List", "ScalarList", "Tensor"}, ew());
    family("_foreach_sub_", {"Scalar", "List", "ScalarList"}, ew());
    family("_foreach_mul_", {"Scalar", "List", "ScalarList", "Tensor"}, ew());
    family("_foreach_mul", {"Scalar", "List", "ScalarList", "Tensor"}, ew());
    family("_foreach_div_", {"Scalar", "List", "ScalarList", "Tensor"}, ew());
    family("_foreach_div", {"Scalar", "List", "ScalarList", "Tensor"}, ew());
    family("_foreach_addcmul_", {"Scalar", "ScalarList", "Tensor"}, ew(2));
    family("_foreach_addcdiv_", {"Scalar", "ScalarList", "Tensor"}, ew(2));
    family("_foreach_lerp_", {"Scalar", "List", "ScalarList"}, ew(2));
    family("_foreach_sqrt", {""}, ew());
    family("_foreach_sqrt_", {""}, ew());
    family("_foreach_neg", {""}, ew());
    family("_foreach_zero_", {""}, ew(0));
    family("_foreach_copy_", {""}, ew(0));
    family("_foreach_maximum_", {"List"}, ew());
    family("_foreach_norm", {"Scalar"}, red(2));
    // Reductions.
    family("sum", {"dim_IntList", "IntList_out", ""}, red());
    family("mean", {"dim", "out"}, red());
    family("amax", {"", "out"}, red());
    family("amin", {"", "out"}, red());
    family("max", {"", "dim", "dim_max"}, red());
    family("min", {"", "dim", "dim_min"}, red());
    family("argmax", {"", "out"}, red());
    family("argmin", {"", "out"}, red());
    family("linalg_vector_norm", {"", "out"}, red(2));
    family("norm", {"ScalarOpt_dim", "out"}, red(2));
    family("prod", {"", "dim_int", "int_out"}, red());
    family("any", {"", "dim", "dims"}, red());
    family("all", {"", "dim", "dims"}, red());
    family("var", {"correction", "correction_out"}, red(3));
    family("std", {"correction", "correction_out"}, red(3));
    family("cumsum", {"", "out"}, red());
    // Softmax, normalization and losses.
    family("_softmax", {"", "out"}, norm(5));
    family("_softmax_backward_data", {"", "out"}, norm(3));
    family("_log_softmax", {"", "out"}, norm(5));
    family("_log_softmax_backward_data", {"", "out"}, norm(3));
    family("native_layer_norm", {""}, norm(8));
    family("native_layer_norm_backward", {""}, norm(12));
    // Normalizations of convolutional networks. group_norm's composite form (the default of a
    // backend without its own kernel) views its input as contiguous and fails on a
    // channels_last one; the CPU kernel on the host views takes any layout, as CUDA's does.
    family("native_batch_norm", {"", "out"}, norm(6));
    family("native_batch_norm_backward", {"", "out"}, norm(10));
    family("native_group_norm", {"", "out"}, norm(8));
    family("native_group_norm_backward", {"", "out"}, norm(12));
    family("var_mean", {"correction", "correction_out"}, red(3));
    family("std_mean", {"correction", "correction_out"}, red(3));
    // Pooling and resampling: a reduction over each window, elementwise over the outputs.
    family("max_pool2d_with_indices", {"", "out"}, red(1));
    family("max_pool2d_with_indices_backward", {"", "grad_input"}, red(1));
    family("avg_pool2d", {"", "out"}, red(1));
    family("avg_pool2d_backward", {"", "grad_input"}, red(1));
    family("_adaptive_avg_pool2d", {"", "out"}, red(1));
    family("_adaptive_avg_pool2d_backward", {"", "out"}, red(1));
    family("upsample_nearest2d", {"", "out"}, ew(0));
    family("upsample_nearest2d_backward", {"", "grad_input"}, red(1));
    family("upsample_bilinear2d", {"", "out"}, ew(8));
    family("upsample_bilinear2d_backward", {"", "grad_input"}, red(8));
    family("nll_loss_forward", {"", "output"}, norm(1));
    family("nll_loss_backward", {"", "grad_input"}, norm(1));
    family("mse_loss", {"", "out"}, red(3));
    // Matrix products: K is the last dimension of the left operand.
    family("mm", {"", "out"}, gemm(0, false));
    family("bmm", {"", "out"}, gemm(0, false));
    family("addmm", {"", "out"}, gemm(1, true));
    family("addmm_", {""}, gemm(1, true));
    family("baddbmm", {"", "out"}, gemm(1, true));
    family("baddbmm_", {""}, gemm(1, true));
    family("_addmm_activation", {"", "out"}, gemm(1, true));
    // Fused attention (scaled_dot_product_attention where the card's choice is flash, see
    // AttentionChoice.cpp). The backward recomputes the scores and makes dV, dP, dQ and dK:
    // five products to the forward's two, 2.5x its flops (FlashAttention-2's count).
    family("_scaled_dot_product_flash_attention_for_cpu", {""}, attention(0, 1.0));
    family("_scaled_dot_product_flash_attention_for_cpu_backward", {""}, attention(1, 2.5));
    // Gathers and scatters.
    family("index_select", {"", "out"}, gather());
    family("gather", {"", "out"}, gather());
    family("index", {"Tensor", "Tensor_out"}, gather());
    family("embedding_dense_backward", {""}, ew());
    family("index_add_", {""}, ew());
    family("scatter_add_", {""}, ew());
    family("masked_select", {"", "out"}, gather());
    family("nonzero", {"", "out"}, red());
    family("index_put_", {""}, ew());
    family("_index_put_impl_", {""}, ew());
    family("scatter", {"src", "value", "src_out", "value_out"}, ew());
    family("scatter_", {"src", "value"}, ew());
    family("cat", {"", "out"}, ew(0));
    family("stack", {"", "out"}, ew(0));
    family("arange", {"start_out"}, ew(0));
    family("uniform_", {""}, ew(2));
    family("normal_", {""}, ew(4));
    family("random_", {"", "from", "to"}, ew(2));
    family("exponential_", {""}, ew(4));
    family("tril", {"", "out"}, ew(0));
    family("triu", {"", "out"}, ew(0));
    family("tril_", {""}, ew(0));
    family("triu_", {""}, ew(0));
    family("sort", {"", "stable", "values", "values_stable"}, red(8));
    family("topk", {"", "values"}, red(4));
    return t;
  }();
  return table;
}

}  // namespace cardsim::kernels
