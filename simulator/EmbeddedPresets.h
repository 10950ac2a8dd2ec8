// The preset files under simulator/presets/, compiled in (generated at build time) so
// the library needs no data directory at run time.
#pragma once

#include <cstddef>

namespace cardsim::sim {

struct EmbeddedPreset {
  const char* name;  // file name without ".textproto"
  const char* text;
};

extern const EmbeddedPreset kEmbeddedPresets[];
extern const std::size_t kEmbeddedPresetCount;

}  // namespace cardsim::sim
