// Device kernels with unboxed signatures of their own: the commonest arithmetic (results
// written straight into device memory), dropout on the device's generator, and
// convolutions (ATen routes them to the "overrideable" operators on this backend).
#include <ATen/ATen.h>
#include <ATen/native/ConvUtils.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cstring>

#include "cardsim/trace.h"
#include "CostModel.h"
#include "DeviceGenerator.h"
#include "HostExecution.h"
#include "KernelLaunch.h"

namespace cardsim::kernels {
namespace {

// ---- Unboxed binary arithmetic ----------------------------------------------------------
// The commonest kernels skip the boxed path: the result is allocated on the device with the
// broadcast shape and promoted type, and the CPU kernel writes straight into it. Anything
// unusual (strided operands, tensors of another device) takes the boxed path.

constexpr auto kDev = c10::DeviceType::PrivateUse1;

c10::OperatorHandle opHandle(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

// `b` may be the same device's tensor or a CPU scalar (a wrapped Python number).
bool fastOperands(const at::Tensor& a, const at::Tensor& b) {
  if (!a.is_contiguous() || a.device().type() != kDev) return false;
  // Operands sharing memory take the boxed path, whose host views let ATen check overlaps.
  if (b.device().type() == kDev)
    return b.device() == a.device() && b.is_contiguous() && !b.storage().is_alias_of(a.storage());
  return b.device().is_cpu() && b.dim() == 0;
}

shim::KernelCost elementwiseCost(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  shim::KernelCost c;
  const auto device = out.device().index();
  c.kernel_class = shim::KernelClass::Elementwise;
  c.dtype = costDtype(out.scalar_type(), device);
  c.flops = static_cast<double>(out.numel()) * flopScale(out.scalar_type(), device);
  c.bytes_read = tensorBytes(a) + (b.device().type() == kDev ? tensorBytes(b) : 0.0);
  c.bytes_written = tensorBytes(out);
  // The braced lists copy the tensors (reference counts: 5% of a small op); the
  // elementwise ops are the hot ones, so they ask first.
  if (shim::traceRecording()) {
    if (b.device().type() == kDev) noteOperandShapes({a, b}, {out});
    else noteOperandShapes({a}, {out});
  }
  return c;
}

at::Tensor boxedCall(const c10::OperatorHandle& op, torch::jit::Stack st) {
  runOnHost(op, &st);
  return st[0].toTensor();
}

enum class Bin { Add, Sub, Mul, Div };

void hostBinary(Bin k, at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  switch (k) {
    case Bin::Add: at::add_out(out, a, b, alpha); break;
    case Bin::Sub: at::sub_out(out, a, b, alpha); break;
    case Bin::Mul: at::mul_out(out, a, b); break;
    case Bin::Div: at::div_out(out, a, b); break;
  }
}

// Small same-shape float operands (the optimizer's and the model's many tiny tensors): the
// loop itself, on the device memory, instead of three CPU aliases and ATen's TensorIterator
// (about a third of a 16-element add on the card). IEEE +, -, * and / of two floats round
// once whatever evaluates them, so each element is bit for bit what the CPU kernel gives;
// bf16 and fp16 compute in float and round once to their type, as the CPU kernel does
// (alpha only 1: with another alpha the CPU kernel may fuse its multiply-add).
constexpr int64_t kPlainLoopElements = 1 << 14;

template <Bin K, typename T, typename Acc = T>
void plainBinary(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const Acc x = static_cast<Acc>(a[i]), y = static_cast<Acc>(b[i]);
    if constexpr (K == Bin::Add) out[i] = static_cast<T>(x + y);
    else if constexpr (K == Bin::Sub) out[i] = static_cast<T>(x - y);
    else if constexpr (K == Bin::Mul) out[i] = static_cast<T>(x * y);
    else out[i] = static_cast<T>(x / y);
  }
}

template <Bin K>
bool plainOperands(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  if (b.device().type() != kDev || a.scalar_type() != b.scalar_type() || !a.sizes().equals(b.sizes())) return false;
  const at::ScalarType t = a.scalar_type();
  if (t != at::kFloat && t != at::kDouble && t != at::kBFloat16 && t != at::kHalf) return false;
  if (a.numel() > kPlainLoopElements || a.is_conj() || b.is_conj() || a.is_neg() || b.is_neg()) return false;
  if constexpr (K == Bin::Add || K == Bin::Sub)
    if (!alpha.isIntegral(false) || alpha.toLong() != 1) return false;
  return true;
}

template <Bin K>
const char* binName();

// Launches the plain loop over `out` = `a` op `b` (plainOperands holds; `out` may be `a`).
template <Bin K>
void launchPlain(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  const int64_t n = a.numel();
  const shim::KernelCost cost = elementwiseCost(out, a, b);
  const auto run = [&](auto tag, auto acc) {
    using T = decltype(tag);
    using Acc = decltype(acc);
    T* o = out.data_ptr<T>();
    const T *x = a.const_data_ptr<T>(), *y = b.const_data_ptr<T>();
    launch(a.device().index(), binName<K>(), cost, [o, x, y, n] { plainBinary<K, T, Acc>(o, x, y, n); },
           {&out, &a, &b});
  };
  switch (a.scalar_type()) {
    case at::kFloat: return run(float{}, float{});
    case at::kDouble: return run(double{}, double{});
    case at::kBFloat16: return run(c10::BFloat16{}, float{});
    default: return run(c10::Half{}, float{});
  }
}

template <Bin K>
const char* binName() {
  switch (K) {
    case Bin::Add: return "aten::add.Tensor";
    case Bin::Sub: return "aten::sub.Tensor";
    case Bin::Mul: return "aten::mul.Tensor";
    case Bin::Div: return "aten::div.Tensor";
  }
  return "";
}

template <Bin K>
const char* binBase() {
  switch (K) {
    case Bin::Add: return "aten::add";
    case Bin::Sub: return "aten::sub";
    case Bin::Mul: return "aten::mul";
    case Bin::Div: return "aten::div";
  }
  return "";
}

template <Bin K>
at::Tensor binary(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  if (!fastOperands(a, b)) {
    static const c10::OperatorHandle op = opHandle(binBase<K>(), "Tensor");
    if constexpr (K == Bin::Add || K == Bin::Sub) return boxedCall(op, {a, b, alpha});
    else return boxedCall(op, {a, b});
  }
  c10::DeviceGuard guard(a.device());
  if (plainOperands<K>(a, b, alpha)) {
    at::Tensor out = at::empty(a.sizes(), a.options());
    launchPlain<K>(out, a, b);
    return out;
  }
  at::ScalarType dt = at::result_type(a, b);
  if (K == Bin::Div && at::isIntegralType(dt, /*includeBool=*/true))
    dt = c10::typeMetaToScalarType(at::get_default_dtype());
  at::Tensor out = at::empty(at::infer_size(a.sizes(), b.sizes()), a.options().dtype(dt));
  at::Tensor oa = cpuAlias(out), aa = cpuAlias(a);
  at::Tensor ba = b.device().type() == kDev ? cpuAlias(b) : b;
  launch(a.device().index(), binName<K>(), elementwiseCost(out, a, b),
         [oa, aa, ba, alpha]() mutable { hostBinary(K, oa, aa, ba, alpha); }, {&out, &a, &b});
  return out;
}

template <Bin K>
at::Tensor& binaryInplace(at::Tensor& self, const at::Tensor& b, const at::Scalar& alpha) {
  if (!fastOperands(self, b) || !c10::IntArrayRef(at::infer_size(self.sizes(), b.sizes())).equals(self.sizes())) {
    static const c10::OperatorHandle op = opHandle((std::string(binBase<K>()) + "_").c_str(), "Tensor");
    if constexpr (K == Bin::Add || K == Bin::Sub) boxedCall(op, {self, b, alpha});
    else boxedCall(op, {self, b});
    return self;
  }
  c10::DeviceGuard guard(self.device());
  if (plainOperands<K>(self, b, alpha)) {
    launchPlain<K>(self, self, b);
    return self;
  }
  at::Tensor sa = cpuAlias(self);
  at::Tensor ba = b.device().type() == kDev ? cpuAlias(b) : b;
  launch(self.device().index(), binName<K>(), elementwiseCost(self, self, b),
         [sa, ba, alpha]() mutable { hostBinary(K, sa, sa, ba, alpha); }, {&self, &b});
  return self;
}

at::Tensor fast_add(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) { return binary<Bin::Add>(a, b, alpha); }
at::Tensor fast_sub(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) { return binary<Bin::Sub>(a, b, alpha); }
at::Tensor fast_mul(const at::Tensor& a, const at::Tensor& b) { return binary<Bin::Mul>(a, b, 1); }
at::Tensor fast_div(const at::Tensor& a, const at::Tensor& b) { return binary<Bin::Div>(a, b, 1); }
at::Tensor& fast_add_(at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) { return binaryInplace<Bin::Add>(a, b, alpha); }
at::Tensor& fast_sub_(at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) { return binaryInplace<Bin::Sub>(a, b, alpha); }
at::Tensor& fast_mul_(at::Tensor& a, const at::Tensor& b) { return binaryInplace<Bin::Mul>(a, b, 1); }
at::Tensor& fast_div_(at::Tensor& a, const at::Tensor& b) { return binaryInplace<Bin::Div>(a, b, 1); }

// Dropout draws its mask from the device's generator (the CPU kernel would use the CPU's).
std::tuple<at::Tensor, at::Tensor> nativeDropout(const at::Tensor& input, double p, std::optional<bool> train) {
  TORCH_CHECK_VALUE(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  c10::DeviceGuard guard(input.device());
  if (train.has_value() && !*train) return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  at::Tensor out = at::empty_like(input, at::MemoryFormat::Contiguous);
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool), at::MemoryFormat::Contiguous);
  at::Tensor in_h = cpuAlias(input), out_h = cpuAlias(out), mask_h = cpuAlias(mask);
  at::Generator gen = cpuGeneratorFor(std::nullopt, input.device().index());
  shim::KernelCost c = elementwiseCost(out, input, mask);
  c.flops *= 3;
  launch(input.device().index(), "aten::native_dropout", c, [=]() mutable {
    if (p >= 1) {
      mask_h.zero_();
      out_h.zero_();
      return;
    }
    at::Tensor keep = at::empty_like(in_h).bernoulli_(1 - p, gen);
    mask_h.copy_(keep);
    at::mul_out(out_h, in_h, keep).mul_(1 / (1 - p));
  }, {&input, &out, &mask});
  return {out, mask};
}

// Convolutions: on this backend ATen routes them to the "overrideable" operators, which
// have no CPU kernel of that name; run ATen's CPU convolution on the host views.
double convFlops(const at::Tensor& out, const at::Tensor& weight, bool transposed, const at::Tensor& input) {
  const double per_out = static_cast<double>(weight.numel()) / static_cast<double>(std::max<int64_t>(weight.size(0), 1));
  return 2.0 * per_out * static_cast<double>(transposed ? input.numel() : out.numel());
}

// The output's spatial size along one dimension (PyTorch's convolution arithmetic).
int64_t convOutSize(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int64_t op, bool transposed) {
  return transposed ? (in - 1) * s - 2 * p + d * (k - 1) + op + 1 : (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

int64_t atOrLast(c10::IntArrayRef v, size_t i) { return v.empty() ? 0 : v[std::min(i, v.size() - 1)]; }

// The memory format ATen's CPU convolution gives its results (and the gradients of its
// backward) for these operands: the one of the backend it picks for the host views, which
// carry the device tensors' strides. So a channels_last input or weight gives a
// channels_last output, as on the CPU and on CUDA (cuDNN), instead of a contiguous one.
at::MemoryFormat convResultFormat(const at::Tensor& in_h, const at::Tensor& w_h, const std::optional<at::Tensor>& b_h,
                                  c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                  bool transposed, c10::IntArrayRef output_padding, int64_t groups) {
  if (w_h.dim() != 4 && w_h.dim() != 5) return at::MemoryFormat::Contiguous;
  const auto backend = at::native::select_conv_backend(
      in_h, w_h, b_h, c10::fromIntArrayRefSlow(stride), c10::fromIntArrayRefSlow(padding),
      c10::fromIntArrayRefSlow(dilation), transposed, c10::fromIntArrayRefSlow(output_padding), c10::SymInt(groups),
      std::nullopt);
  return at::native::_determine_backend_memory_format(in_h, w_h, backend);
}

// Convolutions go through launch() with their results allocated first, so that they can be
// captured into a graph (each replay recomputes them on the host views) and timed in timing mode.
at::Tensor convolutionOverrideable(const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                   c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                   c10::IntArrayRef output_padding, int64_t groups) {
  c10::DeviceGuard guard(input.device());
  HostCall call;
  call.op_name = "aten::convolution_overrideable";
  at::Tensor in_h = call.toHost(input), w_h = call.toHost(weight);
  std::optional<at::Tensor> b_h;
  at::Tensor b_dev;
  if (bias.has_value() && bias->defined()) {
    b_h = call.toHost(*bias);
    b_dev = *bias;
  }
  const bool batched = input.dim() == weight.dim();
  std::vector<int64_t> shape;
  if (batched) shape.push_back(input.size(0));
  shape.push_back(transposed ? weight.size(1) * groups : weight.size(0));
  const int64_t spatial0 = batched ? 2 : 1;
  for (int64_t i = 0; i + 2 < weight.dim(); ++i)
    shape.push_back(convOutSize(input.size(spatial0 + i), weight.size(2 + i), atOrLast(stride, i),
                                atOrLast(padding, i), atOrLast(dilation, i),
                                transposed ? atOrLast(output_padding, i) : 0, transposed));
  const at::MemoryFormat format = batched ? convResultFormat(in_h, w_h, b_h, stride, padding, dilation, transposed,
                                                          output_padding, groups)
                                         : at::MemoryFormat::Contiguous;
  at::Tensor out = at::empty(shape, input.options().memory_format(format));
  at::Tensor out_h = cpuAlias(out);
  const std::vector<int64_t> st(stride.begin(), stride.end()), pad(padding.begin(), padding.end()),
      dil(dilation.begin(), dilation.end()), opad(output_padding.begin(), output_padding.end());
  shim::KernelCost c;
  c.kernel_class = shim::KernelClass::Gemm;
  c.dtype = costDtype(out.scalar_type(), call.device);
  c.flops = convFlops(out, weight, transposed, input) * flopScale(out.scalar_type(), call.device);
  c.bytes_read = tensorBytes(input) + tensorBytes(weight) + (b_h ? tensorBytes(*bias) : 0.0);
  c.bytes_written = tensorBytes(out);
  launch(call.device, "aten::convolution", c, [=]() mutable {
    at::Tensor r = at::convolution(in_h, w_h, b_h, st, pad, dil, transposed, opad, groups);
    out_h.copy_(r);
  }, {&input, &weight, &b_dev, &out});
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolutionBackwardOverrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  c10::DeviceGuard guard(input.device());
  HostCall call;
  call.op_name = "aten::convolution_backward_overrideable";
  at::Tensor g_h = call.toHost(grad_output), in_h = call.toHost(input), w_h = call.toHost(weight);
  const std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * groups : weight.size(0)};
  const at::MemoryFormat format = input.dim() == weight.dim()
      ? convResultFormat(in_h, w_h, std::nullopt, stride, padding, dilation, transposed, output_padding, groups)
      : at::MemoryFormat::Contiguous;
  at::Tensor dgi = output_mask[0] ? at::empty(input.sizes(), input.options().memory_format(format)) : at::Tensor();
  at::Tensor dgw = output_mask[1] ? at::empty(weight.sizes(), weight.options().memory_format(format)) : at::Tensor();
  at::Tensor dgb = output_mask[2] ? at::empty(bias_sizes, grad_output.options()) : at::Tensor();
  at::Tensor gi_h = dgi.defined() ? cpuAlias(dgi) : at::Tensor();
  at::Tensor gw_h = dgw.defined() ? cpuAlias(dgw) : at::Tensor();
  at::Tensor gb_h = dgb.defined() ? cpuAlias(dgb) : at::Tensor();
  const std::vector<int64_t> st(stride.begin(), stride.end()), pad(padding.begin(), padding.end()),
      dil(dilation.begin(), dilation.end()), opad(output_padding.begin(), output_padding.end());
  shim::KernelCost c;
  c.kernel_class = shim::KernelClass::Gemm;
  c.dtype = costDtype(grad_output.scalar_type(), call.device);
  const double fwd = convFlops(grad_output, weight, transposed, input);
  c.flops = fwd * ((output_mask[0] ? 1 : 0) + (output_mask[1] ? 1 : 0)) * flopScale(grad_output.scalar_type(), call.device);
  c.bytes_read = tensorBytes(grad_output) + tensorBytes(input) + tensorBytes(weight);
  c.bytes_written = (dgi.defined() ? tensorBytes(dgi) : 0.0) + (dgw.defined() ? tensorBytes(dgw) : 0.0) +
                    (dgb.defined() ? tensorBytes(dgb) : 0.0);
  launch(call.device, "aten::convolution_backward", c, [=]() mutable {
    auto [gi, gw, gb] = at::convolution_backward(g_h, in_h, w_h, at::OptionalIntArrayRef(bias_sizes), st, pad,
                                                 dil, transposed, opad, groups, output_mask);
    if (gi_h.defined()) gi_h.copy_(gi);
    if (gw_h.defined()) gw_h.copy_(gw);
    if (gb_h.defined()) gb_h.copy_(gb);
  }, {&grad_output, &input, &weight, &dgi, &dgw, &dgb});
  return {dgi, dgw, dgb};
}

// ---- Matrix products -------------------------------------------------------------------
// The result is allocated with its known shape and the CPU kernel writes straight into it
// (no copy of a fresh host result). Shapes the kernel would reject take the boxed path,
// which reports the CPU kernel's own error.

shim::KernelCost gemmCost(const at::Tensor& lhs, const at::Tensor& out, const std::vector<at::Tensor>& ins,
                          bool bias) {
  const shim::KernelCost c = estimateCost(OpCost{CostKind::Gemm, 1, 0, bias}, [&] {
    std::vector<at::Tensor> v{lhs};
    for (const auto& t : ins) if (!t.is_same(lhs)) v.push_back(t);   // x @ x reads x once
    return v;
  }(), {out}, out.device().index());
  noteOperandShapes(ins, {out});   // the operands as passed, x @ x included
  return c;
}

bool plainMatrices(const at::Tensor& a, const at::Tensor& b, int64_t dim) {
  return a.device().type() == kDev && b.device() == a.device() && a.dim() == dim && b.dim() == dim &&
         a.scalar_type() == b.scalar_type() && a.size(-1) == b.size(-2) &&
         (dim == 2 || a.size(0) == b.size(0));
}

// mm and bmm: the same kernel but for the batch dimension.
template <bool kBatched>
at::Tensor matmulKernel(const at::Tensor& a, const at::Tensor& b) {
  constexpr const char* name = kBatched ? "aten::bmm" : "aten::mm";
  if (!plainMatrices(a, b, kBatched ? 3 : 2)) {
    static const c10::OperatorHandle op = opHandle(name, "");
    return boxedCall(op, {a, b});
  }
  c10::DeviceGuard guard(a.device());
  HostCall call;
  call.op_name = name;
  at::Tensor ah = call.toHost(a), bh = call.toHost(b);
  at::Tensor out = kBatched ? at::empty({a.size(0), a.size(1), b.size(2)}, a.options())
                            : at::empty({a.size(0), b.size(1)}, a.options());
  at::Tensor oh = cpuAlias(out);
  launch(a.device().index(), name, gemmCost(a, out, {a, b}, false), [oh, ah, bh]() mutable {
    if constexpr (kBatched) at::bmm_out(oh, ah, bh);
    else at::mm_out(oh, ah, bh);
  }, {&out, &a, &b});
  return out;
}

at::Tensor fastMm(const at::Tensor& a, const at::Tensor& b) { return matmulKernel<false>(a, b); }
at::Tensor fastBmm(const at::Tensor& a, const at::Tensor& b) { return matmulKernel<true>(a, b); }

at::Tensor fastAddmm(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                     const at::Scalar& beta, const at::Scalar& alpha) {
  const bool plain = plainMatrices(m1, m2, 2) && self.device() == m1.device() &&
                     self.scalar_type() == m1.scalar_type() && self.dim() <= 2 &&
                     c10::IntArrayRef(at::infer_size(self.sizes(), {m1.size(0), m2.size(1)}))
                         .equals({m1.size(0), m2.size(1)});
  if (!plain) {
    static const c10::OperatorHandle op = opHandle("aten::addmm", "");
    return boxedCall(op, {self, m1, m2, beta, alpha});
  }
  c10::DeviceGuard guard(m1.device());
  HostCall call;
  call.op_name = "aten::addmm";
  at::Tensor sh = call.toHost(self), ah = call.toHost(m1), bh = call.toHost(m2);
  at::Tensor out = at::empty({m1.size(0), m2.size(1)}, m1.options());
  at::Tensor oh = cpuAlias(out);
  launch(m1.device().index(), "aten::addmm", gemmCost(m1, out, {self, m1, m2}, true),
         [oh, sh, ah, bh, beta, alpha]() mutable { at::addmm_out(oh, sh, ah, bh, beta, alpha); },
         {&out, &self, &m1, &m2});
  return out;
}

}  // namespace

// The host executor skips these names when it registers the cost table.
constexpr const char* kUnboxed[] = {"mm", "bmm", "addmm", "native_dropout", "add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor",
                                "add_.Tensor", "sub_.Tensor", "mul_.Tensor", "div_.Tensor"};
bool isUnboxed(const char* name) {
  for (const char* n : kUnboxed)
    if (std::strcmp(n, name) == 0) return true;
  return false;
}

}  // namespace cardsim::kernels

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace cardsim::kernels;
  m.impl("add.Tensor", TORCH_FN(fast_add));
  m.impl("sub.Tensor", TORCH_FN(fast_sub));
  m.impl("mul.Tensor", TORCH_FN(fast_mul));
  m.impl("div.Tensor", TORCH_FN(fast_div));
  m.impl("add_.Tensor", TORCH_FN(fast_add_));
  m.impl("sub_.Tensor", TORCH_FN(fast_sub_));
  m.impl("mul_.Tensor", TORCH_FN(fast_mul_));
  m.impl("div_.Tensor", TORCH_FN(fast_div_));
  m.impl("native_dropout", TORCH_FN(nativeDropout));
  m.impl("mm", TORCH_FN(fastMm));
  m.impl("bmm", TORCH_FN(fastBmm));
  m.impl("addmm", TORCH_FN(fastAddmm));
  m.impl("convolution_overrideable", TORCH_FN(convolutionOverrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolutionBackwardOverrideable));
}
