// Fuzz target: the configuration parsers (simulator/Config) on arbitrary text. The first
// byte picks what the rest is: a text-format preset, one `key.path=value` override applied
// to a real preset, or a CARDSIM_CONFIG file of such lines. Every input may be refused with
// ConfigError; anything else is a bug. Accepted presets also go through validation.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "simulator/Config.h"
#include "simulator/FabricConfig.h"
#include "simulator/proto/config.pb.h"

using namespace cardsim;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    config::Preset preset;
    switch (data[0] % 3) {
      case 0:
        preset = sim::parsePresetText(text, "fuzz");
        break;
      case 1:
        static const config::Preset mlu = sim::loadPreset("mlu370-x8");
        preset = mlu;
        sim::applyOverride(preset, text, "fuzz");
        break;
      default: {
        static const int fd = memfd_create("cardsim-fuzz-config", 0);
        if (fd < 0) std::abort();
        if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
          std::abort();
        static const config::Preset br = sim::loadPreset("br100");
        preset = br;
        sim::applyOverridesFile(preset, "/proc/self/fd/" + std::to_string(fd));
      }
    }
    (void)sim::toDeviceParams(preset, "fuzz");
  } catch (const sim::ConfigError&) {
  }
  return 0;
}
