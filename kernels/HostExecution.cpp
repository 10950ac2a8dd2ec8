#include "HostExecution.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>
#include <unordered_map>

#include "CostModel.h"
#include "DeviceGenerator.h"
#include "KernelLaunch.h"

namespace cardsim::kernels {
namespace {

using Kind = CostKind;

struct CostedOp {
  const char* name;   // "add.Tensor": the ATen operator name and overload
  OpCost cost;
};

OpCost ew(double f = 1) { return {Kind::Elementwise, f, 0, false}; }
OpCost red(double f = 1) { return {Kind::Reduction, f, 0, false}; }
OpCost norm(double f) { return {Kind::Normalization, f, 0, false}; }
OpCost gemm(int lhs, bool bias) { return {Kind::Gemm, 1, lhs, bias}; }
OpCost gather() { return {Kind::Gather, 0, 0, false}; }

// The operators with a cost model of their own (the hot set of training and inference).
// Functional forms, in-place forms and out= forms each have their own registration.
const std::vector<CostedOp>& costedTable() {
  static const std::vector<CostedOp> table = [] {
    std::vector<CostedOp> t;
    auto family = [&](const char* base, std::initializer_list<const char*> overloads, OpCost c) {
      for (const char* o : overloads) {
        std::string n = std::string(base) + (*o ? std::string(".") + o : std::string());
        t.push_back({strdup(n.c_str()), c});   // lives as long as the registrations
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
    // Gathers and scatters.
    family("index_select", {"", "out"}, gather());
    family("gather", {"", "out"}, gather());
    family("index", {"Tensor", "Tensor_out"}, gather());
    family("embedding_dense_backward", {""}, ew());
    family("index_add_", {""}, ew());
    family("scatter_add_", {""}, ew());
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

struct OpEntry {
  std::string name;                 // "aten::add.Tensor": the kernel's name on the timeline
  OpCost cost;
  bool fallback = true;
  std::vector<size_t> generator_args;   // positions of Generator? arguments
  std::vector<size_t> written_args;     // positions of arguments the op writes (a!)
  bool cpu_operands_allowed = false;    // indexing: CPU index tensors are accepted
};

std::mutex g_fallback_mutex;
std::set<std::string> g_fallback_ops;

const OpEntry& entryFor(const c10::OperatorHandle& op) {
  static std::mutex mutex;
  static std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpEntry>> cache;
  thread_local std::unordered_map<const c10::FunctionSchema*, const OpEntry*> local;
  const c10::FunctionSchema* key = &op.schema();
  if (auto it = local.find(key); it != local.end()) return *it->second;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = cache[key];
  if (!slot) {
    auto e = std::make_unique<OpEntry>();
    const auto& schema = op.schema();
    std::string short_name = schema.name().substr(schema.name().find("::") + 2);
    if (!schema.overload_name().empty()) short_name += "." + schema.overload_name();
    e->name = schema.name() + (schema.overload_name().empty() ? "" : "." + schema.overload_name());
    for (const auto& c : costedTable())
      if (short_name == c.name) {
        e->cost = c.cost;
        e->fallback = false;
        break;
      }
    for (const char* n : {"index.Tensor", "index.Tensor_out", "index_put_", "index_put",
                          "_index_put_impl_", "_unsafe_index.Tensor", "_unsafe_index_put"})
      if (short_name == n) e->cpu_operands_allowed = true;
    const auto gen_type = c10::OptionalType::create(c10::GeneratorType::get());
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const auto& a = schema.arguments()[i];
      if (a.type()->isSubtypeOf(*gen_type)) e->generator_args.push_back(i);
      if (a.alias_info() && a.alias_info()->isWrite()) e->written_args.push_back(i);
    }
    slot = std::move(e);
  }
  local[key] = slot.get();
  return *slot;
}

struct HostCall {
  std::vector<std::pair<at::Tensor, at::Tensor>> aliases;   // (device tensor, CPU alias)
  std::vector<at::Tensor> tensor_args;                      // device tensors, schema order
  std::set<const c10::TensorImpl*> written;                 // device tensors the op writes
  std::optional<c10::Device> cpu_seen;                      // a CPU operand met before any device one
  c10::DeviceIndex device = -1;
  bool writing = false;                                     // converting a written argument
  bool cpu_operands_allowed = false;                        // indexing takes CPU index tensors
  const char* op_name = "";
  // One CPU storage per device storage, so ATen sees arguments that share memory as aliases.
  std::unordered_map<const c10::StorageImpl*, c10::Storage> host_storage;

  at::Tensor toHost(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) {
      // As on CUDA, only CPU scalars (0-dim tensors) may join device tensors in a kernel.
      if (t.defined() && t.dim() > 0 && !cpu_operands_allowed && device >= 0)
        TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                    "devices, ", c10::Device(c10::DeviceType::PrivateUse1, device), " and ", t.device(),
                    "! (in ", op_name, ")");
      if (t.defined() && t.dim() > 0 && !cpu_operands_allowed) cpu_seen = t.device();
      tensor_args.emplace_back();
      return t;
    }
    if (device < 0) {
      device = t.device().index();
      if (cpu_seen.has_value())
        TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                    "devices, ", t.device(), " and ", *cpu_seen, "! (in ", op_name, ")");
    }
    TORCH_CHECK(t.device().index() == device, "Expected all tensors to be on the same device, but "
                "found at least two devices, ", c10::Device(c10::DeviceType::PrivateUse1, device),
                " and ", t.device(), "! (in ", op_name, ")");
    auto [it, fresh] = host_storage.try_emplace(t.storage().unsafeGetStorageImpl());
    if (fresh) it->second = cpuAliasStorage(t);
    at::Tensor a = cpuAliasOver(it->second, t);
    aliases.emplace_back(t, a);
    tensor_args.push_back(t);
    if (writing) written.insert(t.unsafeGetTensorImpl());
    return a;
  }

  // A result of the CPU kernel, as a device tensor.
  at::Tensor toDevice(const at::Tensor& r) {
    if (!r.defined() || r.device().type() != c10::DeviceType::CPU) return r;
    for (const auto& [dev, a] : aliases)
      if (r.unsafeGetTensorImpl() == a.unsafeGetTensorImpl()) return dev;
    const void* data = r.storage().data();
    if (data)
      for (const auto& [dev, a] : aliases)
        if (a.storage().data() == data) {   // a view of an argument: same device storage
          at::Tensor v = at::detail::make_tensor<c10::TensorImpl>(
              c10::Storage(dev.storage()), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
              r.dtype());
          v.unsafeGetTensorImpl()->set_sizes_and_strides(r.sizes(), r.strides(), r.storage_offset());
          return v;
        }
    at::Tensor src = r.is_non_overlapping_and_dense() ? r : r.contiguous();
    at::Tensor d = at::empty_strided(src.sizes(), src.strides(),
                                     src.options().device(c10::DeviceType::PrivateUse1, device));
    if (src.numel() > 0) std::memcpy(d.data_ptr(), src.data_ptr(), src.nbytes());
    return d;
  }

  // Arguments the CPU kernel resized (out= tensors of the wrong shape) or re-strided.
  void syncWrittenArguments() {
    for (auto& [dev, a] : aliases) {
      const bool moved = a.storage().data() != dev.storage().data();
      if (!moved && a.sizes().equals(dev.sizes()) && a.strides().equals(dev.strides()) &&
          a.storage_offset() == dev.storage_offset())
        continue;
      if (moved) {
        dev.resize_(a.sizes());
        cpuAlias(dev).copy_(a);
      } else {
        dev.unsafeGetTensorImpl()->set_sizes_and_strides(a.sizes(), a.strides(), a.storage_offset());
      }
    }
  }
};

// While the stream captures a graph, nothing runs: the operator's meta kernel gives the
// results' shapes, the results get device memory, and the graph records a closure that
// runs the CPU kernel on the host views and writes the results into that memory.
void captureOnHost(const c10::OperatorHandle& op, const OpEntry& entry, HostCall& call,
                   torch::jit::Stack* stack, size_t base, shim::Stream stream) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  std::vector<c10::IValue> replay_args(stack->begin() + static_cast<std::ptrdiff_t>(base), stack->end());
  // Meta twins of the host views, sharing a meta storage wherever the device tensors share one.
  std::unordered_map<const void*, c10::Storage> meta_storage;       // device data -> meta storage
  std::unordered_map<const c10::TensorImpl*, std::pair<at::Tensor, at::Tensor>> twin_of;  // alias -> (meta, device)
  std::vector<std::pair<at::Tensor, at::Tensor>> twins;             // (meta, device)
  auto metaOf = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || !t.device().is_cpu()) return t;
    const at::Tensor* dev = nullptr;
    for (const auto& [d, a] : call.aliases)
      if (a.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) dev = &d;
    if (!dev) return t.to(at::kMeta);   // a CPU operand of the call (a scalar tensor)
    const void* key = dev->storage().data();
    auto it = meta_storage.find(key);
    if (it == meta_storage.end())
      it = meta_storage.emplace(key, c10::Storage(c10::make_intrusive<c10::StorageImpl>(
                                         c10::StorageImpl::use_byte_size_t(), dev->storage().nbytes(),
                                         at::DataPtr(nullptr, c10::Device(c10::kMeta)), nullptr, false))).first;
    at::Tensor m = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(it->second), c10::DispatchKeySet(c10::DispatchKey::Meta), t.dtype());
    m.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    twins.emplace_back(m, *dev);
    return m;
  };
  torch::jit::Stack meta(replay_args);
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue& v = meta[i];
    const c10::IValue& orig = replay_args[i];
    if (v.isTensor()) {
      v = metaOf(v.toTensor());
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorList()) out.push_back(metaOf(t));
      v = std::move(out);
    } else if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> out;
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList())
        out.push_back(t.has_value() ? std::optional<at::Tensor>(metaOf(*t)) : std::nullopt);
      v = std::move(out);
    } else if (v.isDevice() && orig.isDevice()) {
      v = c10::Device(c10::kMeta);
    }
  }
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "operator ", entry.name, " cannot be captured into a graph: its result "
                "shapes are unknown without running it (", e.what_without_backtrace(), ")");
  }
  // Arguments the operator resizes (out= tensors of the wrong shape) get their new shape now.
  for (const auto& [m, dev] : twins) {
    if (m.sizes().equals(dev.sizes()) && m.strides().equals(dev.strides())) continue;
    at::Tensor d = dev;
    if (m.storage().nbytes() > dev.storage().nbytes()) d.resize_(m.sizes());
    d.unsafeGetTensorImpl()->set_sizes_and_strides(m.sizes(), m.strides(), m.storage_offset());
  }
  auto deviceOf = [&](const at::Tensor& r) -> at::Tensor {
    if (!r.defined() || r.device().type() != c10::kMeta) return r;
    for (const auto& [m, dev] : twins)
      if (m.unsafeGetTensorImpl() == r.unsafeGetTensorImpl()) return dev;
    for (const auto& [m, dev] : twins)
      if (m.storage().unsafeGetStorageImpl() == r.storage().unsafeGetStorageImpl()) {
        at::Tensor v = at::detail::make_tensor<c10::TensorImpl>(
            c10::Storage(dev.storage()), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), r.dtype());
        v.unsafeGetTensorImpl()->set_sizes_and_strides(r.sizes(), r.strides(), r.storage_offset());
        return v;
      }
    return at::empty_strided(r.sizes(), r.strides(),
                             r.options().device(c10::DeviceType::PrivateUse1, call.device));
  };
  const size_t nret = schema.returns().size();
  std::vector<at::Tensor> outputs;
  std::vector<at::Tensor> destinations;   // host views of the results, by return position
  std::vector<c10::Storage> keep_alive;   // the graph holds the memory it reads and writes
  for (const auto& [dev, a] : call.aliases) keep_alive.push_back(dev.storage());
  stack->erase(stack->begin() + static_cast<std::ptrdiff_t>(base), stack->end());
  for (size_t i = meta.size() - nret; i < meta.size(); ++i) {
    c10::IValue& v = meta[i];
    if (v.isTensor()) {
      at::Tensor d = deviceOf(v.toTensor());
      outputs.push_back(d);
      destinations.push_back(d.defined() ? cpuAlias(d) : at::Tensor());
      if (d.defined()) keep_alive.push_back(d.storage());
      stack->push_back(d);
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorList()) {
        at::Tensor d = deviceOf(t);
        out.push_back(d);
        outputs.push_back(d);
        keep_alive.push_back(d.storage());
      }
      destinations.emplace_back();   // lists are written in place (views) or not at all
      stack->push_back(std::move(out));
    } else {
      destinations.emplace_back();
      stack->push_back(v);
    }
  }
  if (outputs.empty())
    for (const auto& [dev, a] : call.aliases)
      if (call.written.count(dev.unsafeGetTensorImpl())) outputs.push_back(dev);
  shim::KernelCost cost = estimateCost(entry.cost, call.tensor_args, outputs, call.device);
  auto work = [op, replay_args, destinations, keep_alive]() {
    torch::jit::Stack st(replay_args);
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &st);
    for (size_t i = 0; i < destinations.size() && i < st.size(); ++i) {
      if (!destinations[i].defined() || !st[i].isTensor()) continue;
      const at::Tensor& r = st[i].toTensor();
      if (r.data_ptr() != destinations[i].data_ptr()) at::Tensor(destinations[i]).copy_(r);
    }
  };
  throwIfFailed(shim::launchKernel(stream, entry.name, cost, work), entry.name.c_str());
}

void runOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpEntry& entry = entryFor(op);
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t base = stack->size() - nargs;
  HostCall call;
  call.op_name = entry.name.c_str();
  call.cpu_operands_allowed = entry.cpu_operands_allowed;
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue& v = (*stack)[base + i];
    call.writing = std::find(entry.written_args.begin(), entry.written_args.end(), i) !=
                   entry.written_args.end();
    if (v.isTensor()) {
      v = call.toHost(v.toTensor());
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      auto in = v.toTensorList();
      out.reserve(in.size());
      for (const at::Tensor& t : in) out.push_back(call.toHost(t));
      v = std::move(out);
    } else if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> out;
      auto in = v.toOptionalTensorList();
      out.reserve(in.size());
      for (const std::optional<at::Tensor>& t : in)
        out.push_back(t.has_value() ? std::optional<at::Tensor>(call.toHost(*t)) : std::nullopt);
      v = std::move(out);
    } else if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      if (call.device < 0) call.device = v.toDevice().index();
      v = c10::Device(c10::DeviceType::CPU);
    }
  }
  const auto* guard_impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1);
  if (call.device < 0) call.device = guard_impl->getDevice().index();
  for (size_t i : entry.generator_args) {
    c10::IValue& v = (*stack)[base + i];
    std::optional<at::Generator> g;
    if (v.isGenerator()) g = v.toGenerator();
    v = cpuGeneratorFor(g, call.device);
  }
  c10::DeviceGuard device_guard(c10::Device(c10::DeviceType::PrivateUse1, call.device));
  shim::Stream stream = currentStream(call.device);
  const bool capturing = isCapturing(stream);
  if (entry.fallback) {
    std::lock_guard<std::mutex> lock(g_fallback_mutex);
    g_fallback_ops.insert(entry.name);
  }
  if (capturing) {
    captureOnHost(op, entry, call, stack, base, stream);
    return;
  }

  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

  call.syncWrittenArguments();
  const size_t nret = schema.returns().size();
  std::vector<at::Tensor> outputs;
  for (size_t i = stack->size() - nret; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isTensor()) {
      v = call.toDevice(v.toTensor());
      outputs.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorList()) {
        out.push_back(call.toDevice(t));
        outputs.push_back(out.get(out.size() - 1));
      }
      v = std::move(out);
    }
  }
  if (outputs.empty())   // in-place operators that return nothing (_foreach_add_)
    for (const auto& [dev, a] : call.aliases)
      if (call.written.count(dev.unsafeGetTensorImpl())) outputs.push_back(dev);
  shim::KernelCost cost = estimateCost(entry.cost, call.tensor_args, outputs, call.device);
  throwIfFailed(shim::launchKernel(stream, entry.name, cost, nullptr), entry.name.c_str());
}

void hostKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) { runOnHost(op, stack); }

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
  at::ScalarType dt = at::result_type(a, b);
  if (K == Bin::Div && at::isIntegralType(dt, /*includeBool=*/true))
    dt = c10::typeMetaToScalarType(at::get_default_dtype());
  c10::DeviceGuard guard(a.device());
  at::Tensor out = at::empty(at::infer_size(a.sizes(), b.sizes()), a.options().dtype(dt));
  at::Tensor oa = cpuAlias(out), aa = cpuAlias(a);
  at::Tensor ba = b.device().type() == kDev ? cpuAlias(b) : b;
  launch(a.device().index(), binName<K>(), elementwiseCost(out, a, b),
         [oa, aa, ba, alpha]() mutable { hostBinary(K, oa, aa, ba, alpha); });
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
  at::Tensor sa = cpuAlias(self);
  at::Tensor ba = b.device().type() == kDev ? cpuAlias(b) : b;
  launch(self.device().index(), binName<K>(), elementwiseCost(self, self, b),
         [sa, ba, alpha]() mutable { hostBinary(K, sa, sa, ba, alpha); });
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
  });
  return {out, mask};
}

// Convolutions: on this backend ATen routes them to the "overrideable" operators, which
// have no CPU kernel of that name; run ATen's CPU convolution on the host views.
double convFlops(const at::Tensor& out, const at::Tensor& weight, bool transposed, const at::Tensor& input) {
  const double per_out = static_cast<double>(weight.numel()) / static_cast<double>(std::max<int64_t>(weight.size(0), 1));
  return 2.0 * per_out * static_cast<double>(transposed ? input.numel() : out.numel());
}

at::Tensor convolutionOverrideable(const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                   c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                   c10::IntArrayRef output_padding, int64_t groups) {
  c10::DeviceGuard guard(input.device());
  HostCall call;
  call.op_name = "aten::convolution_overrideable";
  at::Tensor in_h = call.toHost(input), w_h = call.toHost(weight);
  std::optional<at::Tensor> b_h;
  if (bias.has_value() && bias->defined()) b_h = call.toHost(*bias);
  TORCH_CHECK(!isCapturing(currentStream(call.device)), "convolution cannot be captured into a graph yet");
  at::Tensor r = at::convolution(in_h, w_h, b_h, stride, padding, dilation, transposed, output_padding, groups);
  at::Tensor out = call.toDevice(r);
  shim::KernelCost c;
  c.kernel_class = shim::KernelClass::Gemm;
  c.dtype = costDtype(out.scalar_type(), call.device);
  c.flops = convFlops(out, weight, transposed, input) * flopScale(out.scalar_type(), call.device);
  c.bytes_read = tensorBytes(input) + tensorBytes(weight) + (b_h ? tensorBytes(*bias) : 0.0);
  c.bytes_written = tensorBytes(out);
  throwIfFailed(shim::launchKernel(currentStream(call.device), "aten::convolution", c, nullptr), "convolution");
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
  TORCH_CHECK(!isCapturing(currentStream(call.device)), "convolution cannot be captured into a graph yet");
  std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * groups : weight.size(0)};
  auto [gi, gw, gb] = at::convolution_backward(g_h, in_h, w_h, at::OptionalIntArrayRef(bias_sizes), stride,
                                               padding, dilation, transposed, output_padding, groups, output_mask);
  at::Tensor dgi = call.toDevice(gi), dgw = call.toDevice(gw), dgb = call.toDevice(gb);
  shim::KernelCost c;
  c.kernel_class = shim::KernelClass::Gemm;
  c.dtype = costDtype(grad_output.scalar_type(), call.device);
  const double fwd = convFlops(grad_output, weight, transposed, input);
  c.flops = fwd * ((output_mask[0] ? 1 : 0) + (output_mask[1] ? 1 : 0)) * flopScale(grad_output.scalar_type(), call.device);
  c.bytes_read = tensorBytes(grad_output) + tensorBytes(input) + tensorBytes(weight);
  c.bytes_written = tensorBytes(dgi) + tensorBytes(dgw) + tensorBytes(dgb);
  throwIfFailed(shim::launchKernel(currentStream(call.device), "aten::convolution_backward", c, nullptr),
                "convolution_backward");
  return {dgi, dgw, dgb};
}

// Registered after the table, so these win for their names.
const char* const kUnboxed[] = {"native_dropout", "add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor",
                                "add_.Tensor", "sub_.Tensor", "mul_.Tensor", "div_.Tensor"};
bool isUnboxed(const char* name) {
  for (const char* n : kUnboxed)
    if (std::strcmp(n, name) == 0) return true;
  return false;
}

}  // namespace

std::vector<std::string> fallbackOperators() {
  std::lock_guard<std::mutex> lock(g_fallback_mutex);
  return {g_fallback_ops.begin(), g_fallback_ops.end()};
}

std::vector<std::string> costedOperators() {
  std::vector<std::string> out;
  for (const auto& c : costedTable()) out.emplace_back(c.name);
  return out;
}

}  // namespace cardsim::kernels

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cardsim::kernels::hostKernel>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace cardsim::kernels;
  for (const auto& c : costedTable())
    if (!isUnboxed(c.name)) m.impl(c.name, torch::CppFunction::makeFromBoxedFunction<&hostKernel>());
  m.impl("add.Tensor", TORCH_FN(fast_add));
  m.impl("sub.Tensor", TORCH_FN(fast_sub));
  m.impl("mul.Tensor", TORCH_FN(fast_mul));
  m.impl("div.Tensor", TORCH_FN(fast_div));
  m.impl("add_.Tensor", TORCH_FN(fast_add_));
  m.impl("sub_.Tensor", TORCH_FN(fast_sub_));
  m.impl("mul_.Tensor", TORCH_FN(fast_mul_));
  m.impl("div_.Tensor", TORCH_FN(fast_div_));
  m.impl("native_dropout", TORCH_FN(nativeDropout));
  m.impl("convolution_overrideable", TORCH_FN(convolutionOverrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolutionBackwardOverrideable));
}
