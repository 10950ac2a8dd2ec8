#include "DeviceGenerator.h"

#include <c10/util/Exception.h>

#include <array>
#include <mutex>

namespace cardsim::kernels {

DeviceGenerator::DeviceGenerator(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      cpu_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

void DeviceGenerator::set_current_seed(uint64_t seed) { cpu_.set_current_seed(seed); }
void DeviceGenerator::set_offset(uint64_t offset) { cpu_.set_offset(offset); }
uint64_t DeviceGenerator::get_offset() const { return cpu_.get_offset(); }
uint64_t DeviceGenerator::current_seed() const { return cpu_.current_seed(); }
uint64_t DeviceGenerator::seed() { return cpu_.seed(); }
void DeviceGenerator::set_state(const c10::TensorImpl& new_state) {
  cpu_.unsafeGetGeneratorImpl()->set_state(new_state);
}
c10::intrusive_ptr<c10::TensorImpl> DeviceGenerator::get_state() const {
  return cpu_.unsafeGetGeneratorImpl()->get_state();
}
DeviceGenerator* DeviceGenerator::clone_impl() const {
  auto* g = new DeviceGenerator(device().index());
  g->cpu_ = cpu_.clone();
  return g;
}

namespace {
constexpr int kMaxDevices = 64;
std::once_flag g_once[kMaxDevices];
std::array<at::Generator, kMaxDevices> g_default;
}  // namespace

const at::Generator& defaultDeviceGenerator(c10::DeviceIndex device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "invalid device index ", int(device),
                    " for a generator");
  std::call_once(g_once[device], [device] {
    g_default[device] = at::make_generator<DeviceGenerator>(device);
  });
  return g_default[device];
}

at::Generator cpuGeneratorFor(const std::optional<at::Generator>& gen, c10::DeviceIndex device) {
  if (gen.has_value() && gen->defined()) {
    if (gen->device().type() == c10::DeviceType::CPU) return *gen;
    auto* dg = dynamic_cast<DeviceGenerator*>(gen->unsafeGetGeneratorImpl());
    TORCH_CHECK(dg, "expected a generator of the device, got one for ", gen->device());
    return dg->cpu();
  }
  auto* dg = static_cast<DeviceGenerator*>(defaultDeviceGenerator(device).unsafeGetGeneratorImpl());
  return dg->cpu();
}

}  // namespace cardsim::kernels
