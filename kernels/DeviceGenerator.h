// The device's random number generator. Random kernels run on the host, so the state is
// a CPU (Philox-free Mersenne Twister) generator per device, kept apart from the CPU's
// default generator: seeding the device does not disturb the CPU stream and vice versa.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace cardsim::kernels {

class DeviceGenerator final : public c10::GeneratorImpl {
 public:
  explicit DeviceGenerator(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The CPU generator the host-side kernels draw from.
  const at::Generator& cpu() const { return cpu_; }

 private:
  DeviceGenerator* clone_impl() const override;
  at::Generator cpu_;
};

// The default generator of a device (what torch.<dev>.manual_seed seeds).
const at::Generator& defaultDeviceGenerator(c10::DeviceIndex device);
// The CPU generator behind `gen` (a DeviceGenerator), or behind the default generator of
// `device` when `gen` is undefined.
at::Generator cpuGeneratorFor(const std::optional<at::Generator>& gen, c10::DeviceIndex device);

}  // namespace cardsim::kernels
