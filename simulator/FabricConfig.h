// The preset's collective fabric (the `fabric` block of its device) in base units, with
// CARDSIM_NODES and overrides applied. Errors name the key path and value (ConfigError).
#pragma once

#include "device_models/fabric/FabricParams.h"
#include "simulator/Config.h"

namespace cardsim::config {
class FabricConfig;
}

namespace cardsim::sim {

// The most nodes a job's fabric may have (fabric.nodes, CARDSIM_NODES, collbench --nodes).
constexpr long kMaxNodes = 65536;

// From a parsed (and overridden) preset; `origin` names it in errors.
fabric::FabricParams toFabricParams(const config::FabricConfig& f, const std::string& origin);

// Loads the preset of `options` with its overrides, then CARDSIM_NODES (nodes of the
// preset's node shape; default the preset's `fabric.nodes`).
fabric::FabricParams loadFabricParams(const SimOptions& options);

}  // namespace cardsim::sim
