// Parsing of quantities with explicit units ("614.4 GB/s", "23374 MiB", "1.5 us").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cardsim::sim {

enum class Dimension {
  Count,      // plain integer, may be negative ("8", "-5")
  Fraction,   // plain number in (0, 1] ("0.8")
  Bytes,      // "24 GiB", "48 GB"
  Bandwidth,  // bytes per second: "614.4 GB/s"
  Time,       // "500 ns"
  Frequency,  // "1.3 GHz"
  Throughput, // operations per second: "96 TFLOPS", "256 TOPS"
  Cycles,     // clock cycles of the device: "100 cycles"
  Number,     // plain number, fractions allowed, no unit ("1.5"), or a ratio "3:2"
  Rate,       // events per second: "215 M/s" (messages, packets)
};

const char* dimensionName(Dimension d);
// An example of a well-formed value, for error messages.
const char* dimensionExample(Dimension d);

// Parses `text` as a value of dimension `d` in base units (bytes, bytes/s, seconds, Hz,
// ops/s, cycles, or the plain number). On failure returns nullopt and sets `why`.
std::optional<double> parseQuantity(const std::string& text, Dimension d, std::string* why);

}  // namespace cardsim::sim
