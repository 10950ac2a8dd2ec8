// Seconds (as the parameters hold them) to SystemC time, rounded up to the picosecond so
// that a wait never ends before the modelled work is done.
#pragma once

#include <cmath>
#include <systemc>

namespace cardsim::model {

inline sc_core::sc_time toScTime(double seconds) {
  const double ps = std::ceil(seconds * 1e12 - 1e-6);
  return sc_core::sc_time(ps > 0 ? ps : 0, sc_core::SC_PS);
}

}  // namespace cardsim::model
