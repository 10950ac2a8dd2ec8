// Loading presets and overrides into DeviceParams. Errors name the file, the key path
// and the value; they are thrown as ConfigError and never end the process.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "device_models/DeviceParams.h"

namespace cardsim::config {
class Preset;
class Quantity;
}

namespace cardsim::sim {

using model::DeviceParams;

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What to simulate: a preset (registry name or path to a .textproto file), overrides
// ("memory.bandwidth=3.2TB/s", applied in order) and an optional overrides file.
struct SimOptions {
  std::string preset = "mlu370-x8";
  uint32_t devices = 8;
  std::vector<std::string> overrides;
  std::string overrides_file;

  // Reads CARDSIM_PRESET, CARDSIM_DEVICES, CARDSIM_CONFIG over the given defaults.
  static SimOptions fromEnvironment(const SimOptions& defaults);
};

// Names of the built-in presets, sorted.
std::vector<std::string> presetNames();

// Parses a preset by registry name, or from a file when `name_or_path` names one
// (contains '/' or ends in ".textproto"). Throws ConfigError.
config::Preset loadPreset(const std::string& name_or_path);

// Parses preset text; `origin` names it in errors. Throws ConfigError.
config::Preset parsePresetText(const std::string& text, const std::string& origin);

// Applies "key.path=value" to the preset's device; `origin` names where it came from.
void applyOverride(config::Preset& preset, const std::string& assignment,
                   const std::string& origin);

// The key an override sets, as applyOverride reads it: trimmed, without a leading
// "device." ("device.fabric.nodes = 2" -> "fabric.nodes"); "" when it has no '='.
std::string overrideKey(const std::string& assignment);

// Applies a file of overrides: one "key.path = value" per line, '#' starts a comment.
void applyOverridesFile(config::Preset& preset, const std::string& path);

// Validates every quantity (present, confidence given, unit of the right kind, in range)
// and converts to base units.
DeviceParams toDeviceParams(const config::Preset& preset, const std::string& origin);

// " [override from ...]" when a --set (or an overrides file) gave the quantity, else "":
// error messages name where a bad value came from.
std::string overrideNote(const config::Quantity& q);

// All of the above from options.
DeviceParams loadDeviceParams(const SimOptions& options);

}  // namespace cardsim::sim
