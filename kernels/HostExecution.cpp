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
#include "ResultMemory.h"

namespace cardsim::kernels {
namespace {

struct OpEntry {
  std::string name;                 // "aten::add.Tensor": the kernel's name on the timeline
  OpCost cost;
  bool fallback = true;
  std::vector<size_t> generator_args;   // positions of Generator? arguments
  std::vector<size_t> written_args;     // positions of arguments the op writes (a!)
  bool cpu_operands_allowed = false;    // indexing: CPU index tensors are accepted
  // The result's size depends on the values (nonzero, unique, masked_select): the host
  // reads a count back from the card before it can size the result, waiting for the stream
  // as CUDA's kernels do. kIfBoolIndex: indexing, only with a boolean mask among its indices;
  // kUnlessSized: unless the caller gave the output size (repeat_interleave).
  enum class HostRead { kNever, kAlways, kIfBoolIndex, kUnlessSized } host_read = HostRead::kNever;
  // One result, a new tensor: it may be made in a lent device block (ResultMemory.h). Not
  // with several results, which could be handed each other's blocks while still unconverted.
  bool one_new_result = false;
  int causal_arg = -1;   // position of a bool is_causal argument (attention), else -1
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
    const std::string base_name = schema.name().substr(schema.name().find("::") + 2);
    for (const char* n : {"nonzero", "masked_select", "_unique", "_unique2", "unique_dim", "unique_consecutive",
                          "unique_dim_consecutive", "bincount", "equal"})
      if (base_name == n) e->host_read = OpEntry::HostRead::kAlways;
    if (base_name == "repeat_interleave") e->host_read = OpEntry::HostRead::kUnlessSized;
    if (e->cpu_operands_allowed && base_name.rfind("_unsafe", 0) != 0) e->host_read = OpEntry::HostRead::kIfBoolIndex;
    const auto gen_type = c10::OptionalType::create(c10::GeneratorType::get());
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const auto& a = schema.arguments()[i];
      if (a.type()->isSubtypeOf(*gen_type)) e->generator_args.push_back(i);
      if (a.alias_info() && a.alias_info()->isWrite()) e->written_args.push_back(i);
      if (a.name() == "is_causal" && a.type()->kind() == c10::TypeKind::BoolType) e->causal_arg = static_cast<int>(i);
    }
    e->one_new_result = schema.returns().size() == 1 && !schema.returns()[0].alias_info() &&
                        schema.returns()[0].type()->kind() == c10::TypeKind::TensorType;
    slot = std::move(e);
  }
  local[key] = slot.get();
  return *slot;
}


// While the stream captures a graph, nothing runs: the operator's meta kernel gives the
// results' shapes, the results get device memory, and the graph records a closure that
// runs the CPU kernel on the host views and writes the results into that memory.
// `record`: a capture (the work is kept for replays); otherwise timing mode, where only the
// result shapes and the cost are needed. False (the stack untouched) when timing mode meets an
// operator whose result shapes depend on values (masked_select, nonzero): the caller runs it.
bool captureOnHost(const c10::OperatorHandle& op, const OpEntry& entry, HostCall& call,
                   torch::jit::Stack* stack, size_t base, shim::Stream stream, bool record) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  std::vector<c10::IValue> replay_args;
  if (record) replay_args.assign(stack->begin() + static_cast<std::ptrdiff_t>(base), stack->end());
  // Meta twins of the host views, sharing a meta storage wherever the device tensors share one.
  // Resizable, as the device storage is: an out= argument of the wrong shape is resized by
  // the meta kernel (arange, cat into an empty tensor), and takes that shape below.
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
                                         at::DataPtr(nullptr, c10::Device(c10::kMeta)),
                                         c10::GetAllocator(c10::kMeta), /*resizable=*/true))).first;
    at::Tensor m = tensorOver(it->second, c10::DispatchKey::Meta, t);
    twins.emplace_back(m, *dev);
    return m;
  };
  torch::jit::Stack meta(stack->begin() + static_cast<std::ptrdiff_t>(base), stack->end());
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue& v = meta[i];
    const c10::IValue& orig = (*stack)[base + i];
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
    if (!record) return false;
    TORCH_CHECK(false, "operator ", entry.name, " cannot be captured into a graph: its result shapes are "
                "unknown without running it (", e.what_without_backtrace(), ")");
  } catch (const std::exception&) {
    if (!record) return false;   // a meta kernel written in Python refusing (nonzero)
    throw;
  }
  // The results take the dtypes the host kernel will give them. Layer norm's meta kernel
  // keeps mean/rstd of reduced-precision input in fp32, the CPU kernel (which replays, and
  // whose backward reads them) in the input's type; full and timing mode must agree too.
  if (entry.name == "aten::native_layer_norm" && meta[0].isTensor()) {
    const size_t first = meta.size() - schema.returns().size();
    const at::ScalarType in = meta[0].toTensor().scalar_type();
    for (size_t i = first + 1; i < meta.size(); ++i)
      if (meta[i].isTensor() && meta[i].toTensor().scalar_type() != in)
        meta[i] = meta[i].toTensor().to(in);
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
      if (m.storage().unsafeGetStorageImpl() == r.storage().unsafeGetStorageImpl())
        return tensorOver(dev.storage(), c10::DispatchKey::PrivateUse1, r);
    return at::empty_strided(r.sizes(), r.strides(),
                             r.options().device(c10::DeviceType::PrivateUse1, call.device));
  };
  const size_t nret = schema.returns().size();
  std::vector<at::Tensor> outputs;
  std::vector<at::Tensor> destinations;   // host views of the results, by return position
  std::vector<std::vector<at::Tensor>> list_destinations;   // the same for list results (_foreach_pow)
  std::vector<c10::Storage> keep_alive;   // the graph holds the memory it reads and writes
  if (record)
    for (const auto& [dev, a] : call.aliases) keep_alive.push_back(dev.storage());
  stack->erase(stack->begin() + static_cast<std::ptrdiff_t>(base), stack->end());
  for (size_t i = meta.size() - nret; i < meta.size(); ++i) {
    c10::IValue& v = meta[i];
    if (v.isTensor()) {
      at::Tensor d = deviceOf(v.toTensor());
      outputs.push_back(d);
      destinations.push_back(d.defined() && record ? cpuAlias(d) : at::Tensor());
      list_destinations.emplace_back();
      if (d.defined() && record) keep_alive.push_back(d.storage());
      stack->push_back(d);
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      std::vector<at::Tensor> views;
      for (const at::Tensor& t : v.toTensorList()) {
        at::Tensor d = deviceOf(t);
        out.push_back(d);
        outputs.push_back(d);
        views.push_back(d.defined() && record ? cpuAlias(d) : at::Tensor());
        keep_alive.push_back(d.storage());
      }
      destinations.emplace_back();
      list_destinations.push_back(std::move(views));   // new tensors each replay writes (_foreach_pow)
      stack->push_back(std::move(out));
    } else {
      destinations.emplace_back();
      list_destinations.emplace_back();
      stack->push_back(v);
    }
  }
  if (outputs.empty())
    for (const auto& [dev, a] : call.aliases)
      if (call.written.count(dev.unsafeGetTensorImpl())) outputs.push_back(dev);
  shim::KernelCost cost = estimateCost(entry.cost, call.tensor_args, outputs, call.device, call.causal);
  if (!record) {
    throwIfFailed(shim::launchKernel(stream, entry.name, cost, nullptr), entry.name.c_str());
    return true;
  }
  auto work = [op, replay_args, destinations, list_destinations, keep_alive]() {
    torch::jit::Stack st(replay_args);
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &st);
    auto land = [](const at::Tensor& dst, const at::Tensor& r) {
      if (dst.defined() && r.defined() && r.data_ptr() != dst.data_ptr()) at::Tensor(dst).copy_(r);
    };
    for (size_t i = 0; i < destinations.size() && i < st.size(); ++i) {
      if (st[i].isTensor()) {
        land(destinations[i], st[i].toTensor());
      } else if (st[i].isTensorList()) {
        const auto results = st[i].toTensorList();
        for (size_t j = 0; j < results.size() && j < list_destinations[i].size(); ++j)
          land(list_destinations[i][j], results.get(j));
      }
    }
  };
  throwIfFailed(shim::launchKernel(stream, entry.name, cost, work), entry.name.c_str());
  return true;
}

bool isDevice(const at::Tensor& t) { return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1; }

// Whether the call needs a count from the card before its result can be sized (see
// OpEntry::host_read). Also refuses indexing a CPU tensor with device indices, as CUDA does.
bool readsBack(const c10::OperatorHandle& op, const OpEntry& entry, const torch::jit::Stack& stack, size_t base) {
  const auto& args = op.schema().arguments();
  switch (entry.host_read) {
    case OpEntry::HostRead::kNever: return false;
    case OpEntry::HostRead::kAlways: return true;
    case OpEntry::HostRead::kUnlessSized:
      for (size_t i = 0; i < args.size(); ++i)
        if (args[i].name() == "output_size") return stack[base + i].isNone();
      return true;
    case OpEntry::HostRead::kIfBoolIndex: break;
  }
  bool mask = false, device_index = false;
  if (args.size() > 1 && stack[base + 1].isOptionalTensorList())
    for (const std::optional<at::Tensor>& t : stack[base + 1].toOptionalTensorList()) {
      if (!t.has_value() || !t->defined()) continue;
      mask = mask || t->scalar_type() == at::kBool || t->scalar_type() == at::kByte;
      device_index = device_index || isDevice(*t);
    }
  const c10::IValue& self = stack[base];
  if (device_index && self.isTensor() && self.toTensor().defined() && !isDevice(self.toTensor()))
    TORCH_CHECK_INDEX(false, "indices should be either on ", c10::kCPU,
                      " or on the same device as the indexed tensor (", self.toTensor().device(), ")");
  return mask;
}

// The host's read of a count the card computed: a small copy back on the stream, waited for
// (the host clock moves to the end of the work queued before it).
void readBack(shim::Stream stream, const void* device_data, size_t bytes, const char* op_name) {
  onHostSync(op_name);
  thread_local void* landing = nullptr;
  if (!landing) throwIfFailed(shim::hostMalloc(&landing, 8), op_name);
  if (device_data && bytes > 0)
    throwIfFailed(shim::memcpyAsync(landing, device_data, std::min<size_t>(bytes, 8), shim::MemcpyKind::DeviceToHost,
                                    stream), op_name);
  throwIfFailed(shim::streamSynchronize(stream), op_name);
}

}  // namespace

void runOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  HostWindow window;   // the CPU kernel works on host views of device memory
  const OpEntry& entry = entryFor(op);
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t base = stack->size() - nargs;
  HostCall call;
  call.op_name = entry.name.c_str();
  call.cpu_operands_allowed = entry.cpu_operands_allowed;
  if (entry.causal_arg >= 0) {
    const c10::IValue& v = (*stack)[base + static_cast<size_t>(entry.causal_arg)];
    call.causal = v.isBool() && v.toBool();
  }
  const bool read_back = readsBack(op, entry, *stack, base);
  const void* read_data = nullptr;   // device bytes the read-back copies (the first operand's)
  size_t read_bytes = 0;
  if (read_back)
    for (size_t i = 0; i < nargs && !read_data; ++i)
      if ((*stack)[base + i].isTensor() && isDevice((*stack)[base + i].toTensor()) &&
          (*stack)[base + i].toTensor().nbytes() > 0) {
        read_data = (*stack)[base + i].toTensor().const_data_ptr();
        read_bytes = (*stack)[base + i].toTensor().nbytes();
      }
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
  // Timing mode takes the capture path: result shapes from the meta kernel, device memory
  // for the results, the cost to the model; the runtime drops the work instead of recording it.
  // An operator whose result shapes depend on values runs in timing mode too, on the host
  // views, which read as the card's memory does (zeros, or carried host data); its results
  // are noted as carried, so that they are scrubbed when the memory is handed out again.
  const bool timing = !capturing && timingMode();
  if ((capturing || timing) && captureOnHost(op, entry, call, stack, base, stream, capturing)) {
    if (read_back && !capturing) readBack(stream, read_data, read_bytes, entry.name.c_str());
    return;
  }

  {
    // Not in timing mode: a block lent and then not taken would keep the kernel's bytes, where
    // timing mode's cached memory reads as zeros.
    DeviceResultScope results(entry.one_new_result && !timing);
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  }

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
  if (timing) {
    auto note = [](const at::Tensor& t) {
      if (t.defined() && t.device().type() == c10::DeviceType::PrivateUse1 && t.nbytes() > 0)
        (void)shim::timingNoteHostWrite(t.data_ptr(), t.nbytes());
    };
    for (const at::Tensor& t : outputs) note(t);
    for (const auto& [dev, a] : call.aliases)
      if (call.written.count(dev.unsafeGetTensorImpl())) note(dev);
  }
  shim::KernelCost cost = estimateCost(entry.cost, call.tensor_args, outputs, call.device, call.causal);
  throwIfFailed(shim::launchKernel(stream, entry.name, cost, nullptr), entry.name.c_str());
  if (read_back) readBack(stream, read_data, read_bytes, entry.name.c_str());
}

namespace {
void hostKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) { runOnHost(op, stack); }
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
}