#include "traces/cli/WhatIf.h"

#include <exception>

#include "simulator/FabricConfig.h"

namespace cardsim::cli {

std::optional<fabric::FabricParams> checkWhatIf(const sim::SimOptions& so) {
  (void)sim::loadDeviceParams(so);
  try {
    return sim::loadFabricParams(so);
  } catch (const std::exception&) {
    // Whose fault: the overrides' (refused by key), or the preset's, which has no fabric.
    if (so.overrides.empty()) return std::nullopt;
    sim::SimOptions plain = so;
    plain.overrides.clear();
    try {
      (void)sim::loadFabricParams(plain);
    } catch (const std::exception&) {
      return std::nullopt;
    }
    throw;
  }
}

}  // namespace cardsim::cli
