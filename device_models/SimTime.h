// Seconds (as the parameters hold them) to SystemC time, rounded up to the picosecond so
// that a wait never ends before the modelled work is done.
#pragma once

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <systemc>

namespace cardsim::model {

// A wait that would carry the simulation past its end (2^63 ps, about 107 days): a what-if
// far outside a card's range (a bandwidth of bytes per second) or an impossible cost. Raised
// rather than wrapped around, which would leave the simulation spinning.
class SimTimeOverflow : public std::overflow_error {
 public:
  using std::overflow_error::overflow_error;
};

inline sc_core::sc_time toScTime(double seconds) {
  const double ps = std::ceil(seconds * 1e12 - 1e-6);
  constexpr double kEndPs = 9223372036854775808.0;   // 2^63
  const double now_ps = static_cast<double>(sc_core::sc_time_stamp().value());
  if (!(ps < kEndPs - now_ps)) {
    char what[256];
    std::snprintf(what, sizeof what,
                  "simulated time overflow: a wait of %.6g s at %.6g s would pass the simulation's end (2^63 ps, about "
                  "107 days); a bandwidth, rate or size far outside the card's range?",
                  seconds, now_ps * 1e-12);
    throw SimTimeOverflow(what);
  }
  return sc_core::sc_time(ps > 0 ? ps : 0, sc_core::SC_PS);
}

}  // namespace cardsim::model
