// A what-if's configuration (a preset and key-path overrides), checked as every replay of
// it would check it, before any replay starts: `cardsim replay` once, `cardsim sweep` once
// per swept value.
#pragma once

#include <optional>

#include "device_models/fabric/FabricParams.h"
#include "simulator/Config.h"

namespace cardsim::cli {

// The fabric of `so`; none when the preset has no fabric (its collectives then fail in the
// replay, naming it). Throws sim::ConfigError naming the key and value for devices the
// overrides or the preset break, and for a fabric the overrides break.
std::optional<fabric::FabricParams> checkWhatIf(const sim::SimOptions& so);

}  // namespace cardsim::cli
