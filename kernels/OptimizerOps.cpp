#include "OptimizerOps.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <memory>
#include <mutex>
#include <set>

#include "CostModel.h"
#include "KernelLaunch.h"

namespace cardsim::kernels {
namespace {

// fp32 working copy of a device tensor's bytes (the tensor itself when it is fp32).
at::Tensor f32(const at::Tensor& host) { return host.scalar_type() == at::kFloat ? host : host.to(at::kFloat); }
void writeBack(const at::Tensor& host, const at::Tensor& work) {
  if (!host.is_same(work)) host.copy_(work);
}

void checkLists(const char* op, std::initializer_list<at::TensorList> lists) {
  const size_t n = lists.begin()->size();
  for (const auto& l : lists)
    TORCH_CHECK_VALUE(l.size() == n, op, ": tensor lists differ in length (", n, " vs ", l.size(), ")");
  for (const auto& l : lists)
    for (size_t i = 0; i < l.size(); ++i) {
      TORCH_CHECK_VALUE(l[i].device().type() == c10::DeviceType::PrivateUse1, op, ": tensor ", i,
                        " is on ", l[i].device(), ", not on the card");
      TORCH_CHECK_VALUE(l[i].numel() == lists.begin()->begin()[i].numel(), op, ": tensor ", i,
                        " has ", l[i].numel(), " elements, its gradient ",
                        lists.begin()->begin()[i].numel());
    }
}

// One launch for the whole list, costed as an elementwise pass over every tensor.
void launchOverLists(const char* name, double flops_per_element, at::TensorList first,
                     std::initializer_list<at::TensorList> read, std::initializer_list<at::TensorList> written,
                     const std::function<void()>& work) {
  if (first.empty()) return;
  const c10::DeviceIndex device = first[0].device().index();
  c10::DeviceGuard guard(first[0].device());
  shim::KernelCost c;
  c.kernel_class = shim::KernelClass::Elementwise;
  c.dtype = costDtype(first[0].scalar_type(), device);
  double elems = 0;
  for (const auto& t : first) elems += static_cast<double>(t.numel());
  for (const auto& l : read) for (const auto& t : l) c.bytes_read += tensorBytes(t);
  std::vector<const at::Tensor*> touched;
  for (const auto& l : read) for (const auto& t : l) touched.push_back(&t);
  for (const auto& l : written) for (const auto& t : l) c.bytes_written += tensorBytes(t);
  c.flops = elems * flops_per_element * flopScale(first[0].scalar_type(), device);
  launch(device, name, c, work, touched);
}

void adamStep(const char* name, at::TensorList grads, at::TensorList params, at::TensorList exp_avgs,
              at::TensorList exp_avg_sqs, double lr, double beta1, double beta2, double eps, int64_t step,
              int64_t mode, int64_t bias_correction, double weight_decay) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  checkLists(name, {grads, params, exp_avgs, exp_avg_sqs});
  const double bc1 = bias_correction ? 1 - std::pow(beta1, static_cast<double>(step)) : 1.0;
  const double bc2 = bias_correction ? 1 - std::pow(beta2, static_cast<double>(step)) : 1.0;
  std::vector<std::array<at::Tensor, 4>> host;
  for (size_t i = 0; i < params.size(); ++i)
    host.push_back({cpuAlias(grads[i]), cpuAlias(params[i]), cpuAlias(exp_avgs[i]), cpuAlias(exp_avg_sqs[i])});
  launchOverLists(name, 12, params, {grads, params, exp_avgs, exp_avg_sqs}, {params, exp_avgs, exp_avg_sqs},
                  [=] {
    for (const auto& [g_h, p_h, m_h, v_h] : host) {
      at::Tensor g = f32(g_h), p = f32(p_h), m = f32(m_h), v = f32(v_h);
      if (mode == 0 && weight_decay != 0) g = g.add(p, weight_decay);
      m.mul_(beta1).add_(g, 1 - beta1);
      v.mul_(beta2).addcmul_(g, g, 1 - beta2);
      at::Tensor update = (m / bc1).div_(v.div(bc2).sqrt_().add_(eps));
      if (mode == 1 && weight_decay != 0) update.add_(p, weight_decay);
      p.add_(update, -lr);
      writeBack(p_h, p);
      writeBack(m_h, m);
      writeBack(v_h, v);
    }
  });
}

void fusedAdam(const at::Tensor& /*noop_flag*/, at::TensorList grads, at::TensorList params,
               at::TensorList exp_avgs, at::TensorList exp_avg_sqs, double lr, double beta1, double beta2,
               double eps, int64_t step, int64_t mode, int64_t bias_correction, double weight_decay) {
  // As DeepSpeed's reference kernel, the no-op flag is not consulted (infs and nans propagate).
  adamStep("fused_adam", grads, params, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps, step, mode,
           bias_correction, weight_decay);
}

void multiTensorAdam(int64_t /*chunk_size*/, const at::Tensor& /*noop_flag*/, at::TensorList grads,
                     at::TensorList params, at::TensorList exp_avgs, at::TensorList exp_avg_sqs, double lr,
                     double beta1, double beta2, double eps, int64_t step, int64_t mode,
                     int64_t bias_correction, double weight_decay) {
  adamStep("deepspeed::multi_tensor_adam", grads, params, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps,
           step, mode, bias_correction, weight_decay);
}

void multiTensorLion(int64_t /*chunk_size*/, const at::Tensor& /*noop_flag*/, at::TensorList grads,
                     at::TensorList params, at::TensorList exp_avgs, double lr, double beta1, double beta2,
                     int64_t /*step*/, double weight_decay) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const char* name = "deepspeed::multi_tensor_lion";
  checkLists(name, {grads, params, exp_avgs});
  std::vector<std::array<at::Tensor, 3>> host;
  for (size_t i = 0; i < params.size(); ++i)
    host.push_back({cpuAlias(grads[i]), cpuAlias(params[i]), cpuAlias(exp_avgs[i])});
  launchOverLists(name, 8, params, {grads, params, exp_avgs}, {params, exp_avgs}, [=] {
    for (const auto& [g_h, p_h, m_h] : host) {
      at::Tensor g = f32(g_h), p = f32(p_h), m = f32(m_h);
      at::Tensor c = m.mul(beta1).add_(g, 1 - beta1);
      // Sign step: -lr where c > 0, +lr otherwise (c == 0 included), as the reference kernel.
      at::Tensor step_dir = c.gt(0).to(at::kFloat).mul_(-2).add_(1);
      p.mul_(1 - lr * weight_decay).add_(step_dir, lr);
      m.mul_(beta2).add_(g, 1 - beta2);
      writeBack(p_h, p);
      writeBack(m_h, m);
    }
  });
}

at::Tensor lamb(const at::Tensor& p_dev, const at::Tensor& p_copy, const at::Tensor& m_dev,
                const at::Tensor& v_dev, const at::Tensor& g_dev, double lr, double beta1, double beta2,
                double max_coeff, double min_coeff, double eps, double combined_scale, int64_t step,
                int64_t eps_mode, int64_t bias_correction, double weight_decay) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const char* name = "deepspeed::lamb";
  checkLists(name, {at::TensorList(g_dev), at::TensorList(p_dev), at::TensorList(m_dev), at::TensorList(v_dev)});
  at::Tensor coeff = at::empty({1}, p_dev.options().dtype(at::kFloat));
  const double bc1 = bias_correction ? 1 - std::pow(beta1, static_cast<double>(step)) : 1.0;
  const double bc2 = bias_correction ? 1 - std::pow(beta2, static_cast<double>(step)) : 1.0;
  const double step_size = bias_correction ? lr * std::sqrt(bc2) / bc1 : lr;
  at::Tensor g_h = cpuAlias(g_dev), p_h = cpuAlias(p_dev), m_h = cpuAlias(m_dev), v_h = cpuAlias(v_dev);
  at::Tensor coeff_h = cpuAlias(coeff);
  at::Tensor copy_h;
  if (p_copy.defined() && p_copy.numel() > 0) {
    TORCH_CHECK_VALUE(p_copy.numel() == p_dev.numel(), name, ": p_copy has ", p_copy.numel(),
                      " elements, the parameter ", p_dev.numel());
    copy_h = p_copy.device().type() == c10::DeviceType::PrivateUse1 ? cpuAlias(p_copy) : p_copy;
  }
  launchOverLists(name, 16, at::TensorList(p_dev), {at::TensorList(g_dev), at::TensorList(p_dev),
                  at::TensorList(m_dev), at::TensorList(v_dev)}, {at::TensorList(p_dev),
                  at::TensorList(m_dev), at::TensorList(v_dev)}, [=] {
    at::Tensor g = f32(g_h).div(combined_scale), p = f32(p_h), m = f32(m_h), v = f32(v_h);
    m.mul_(beta1).add_(g, 1 - beta1);
    v.mul_(beta2).addcmul_(g, g, 1 - beta2);
    at::Tensor denom = eps_mode == 0 ? v.add(eps).sqrt_() : v.sqrt().add_(eps);
    at::Tensor update = m.div(denom);
    if (weight_decay != 0) update.add_(p, weight_decay);
    const double p_norm = p.norm().item<double>(), u_norm = update.norm().item<double>();
    double c = 1.0;
    if (p_norm != 0 && u_norm != 0) c = std::min(std::max(p_norm / u_norm, min_coeff), max_coeff);
    p.add_(update, -step_size * c);
    writeBack(p_h, p);
    writeBack(m_h, m);
    writeBack(v_h, v);
    coeff_h.fill_(c);
    if (copy_h.defined()) copy_h.copy_(p_h.reshape(copy_h.sizes()));
  });
  return coeff;
}

std::mutex g_mutex;
std::vector<std::unique_ptr<torch::Library>> g_libraries;
std::set<std::string> g_done;

torch::Library& library(torch::Library::Kind kind, const std::string& ns, std::optional<c10::DispatchKey> k) {
  g_libraries.push_back(std::make_unique<torch::Library>(kind, ns, k, __FILE__, __LINE__));
  return *g_libraries.back();
}

// Device kernel, and the same kernel under autograd: the optimizers update leaves that
// require grad in place, which autograd must not see.
template <typename Fn>
void implBoth(const std::string& ns, const char* name, Fn fn) {
  library(torch::Library::IMPL, ns, c10::DispatchKey::PrivateUse1).impl(name, fn);
  library(torch::Library::IMPL, ns, c10::DispatchKey::AutogradPrivateUse1).impl(name, fn);
}

}  // namespace

void registerFusedAdam(const std::string& ns) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_done.insert(ns + "::fused_adam").second) return;
  library(torch::Library::FRAGMENT, ns, std::nullopt)
      .def("fused_adam(Tensor noop_flag, Tensor(a!)[] grads, Tensor(b!)[] params, Tensor(c!)[] exp_avgs, "
           "Tensor(d!)[] exp_avg_sqs, float lr, float beta1, float beta2, float epsilon, int step, "
           "int mode, int bias_correction, float weight_decay) -> ()");
  implBoth(ns, "fused_adam", TORCH_FN(fusedAdam));
}

void registerDeepSpeedOps() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_done.insert("deepspeed").second) return;
  auto& def = library(torch::Library::FRAGMENT, "deepspeed", std::nullopt);
  def.def("multi_tensor_adam(int chunk_size, Tensor noop_flag, Tensor(a!)[] grads, Tensor(b!)[] params, "
          "Tensor(c!)[] exp_avgs, Tensor(d!)[] exp_avg_sqs, float lr, float beta1, float beta2, "
          "float epsilon, int step, int mode, int bias_correction, float weight_decay) -> ()");
  def.def("multi_tensor_lion(int chunk_size, Tensor noop_flag, Tensor(a!)[] grads, Tensor(b!)[] params, "
          "Tensor(c!)[] exp_avgs, float lr, float beta1, float beta2, int step, float weight_decay) -> ()");
  def.def("lamb(Tensor(a!) p, Tensor(b!) p_copy, Tensor(c!) exp_avg, Tensor(d!) exp_avg_sq, Tensor grad, "
          "float lr, float beta1, float beta2, float max_coeff, float min_coeff, float eps, "
          "float combined_scale, int step, int eps_mode, int bias_correction, float weight_decay) -> Tensor");
  implBoth("deepspeed", "multi_tensor_adam", TORCH_FN(multiTensorAdam));
  implBoth("deepspeed", "multi_tensor_lion", TORCH_FN(multiTensorLion));
  implBoth("deepspeed", "lamb", TORCH_FN(lamb));
}

}  // namespace cardsim::kernels
