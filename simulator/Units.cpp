#include "simulator/Units.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <utility>
#include <vector>

namespace cardsim::sim {
namespace {

struct UnitDef {
  const char* symbol;
  double scale;
};

// Decimal and binary prefixes as vendors write them: "GB" is 1e9, "GiB" is 2^30.
const std::vector<UnitDef>& unitsFor(Dimension d) {
  static const std::vector<UnitDef> bytes = {
      {"B", 1}, {"KB", 1e3}, {"kB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  static const std::vector<UnitDef> bandwidth = {
      {"B/s", 1}, {"KB/s", 1e3}, {"kB/s", 1e3}, {"MB/s", 1e6}, {"GB/s", 1e9}, {"TB/s", 1e12},
      {"KiB/s", 1024.0}, {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0},
      {"TiB/s", 1099511627776.0},
      // bits per second, as link rates are often quoted
      {"Gb/s", 1e9 / 8}, {"Mb/s", 1e6 / 8}, {"Tb/s", 1e12 / 8}};
  static const std::vector<UnitDef> time = {
      {"ps", 1e-12}, {"ns", 1e-9}, {"us", 1e-6}, {"\u00b5s", 1e-6}, {"\u03bcs", 1e-6}, {"ms", 1e-3}, {"s", 1}};
  static const std::vector<UnitDef> frequency = {
      {"Hz", 1}, {"kHz", 1e3}, {"MHz", 1e6}, {"GHz", 1e9}};
  static const std::vector<UnitDef> throughput = {
      {"FLOPS", 1}, {"GFLOPS", 1e9}, {"TFLOPS", 1e12}, {"PFLOPS", 1e15},
      {"OPS", 1}, {"GOPS", 1e9}, {"TOPS", 1e12}, {"POPS", 1e15}};
  static const std::vector<UnitDef> cycles = {{"cycles", 1}, {"cycle", 1}};
  static const std::vector<UnitDef> rate = {{"/s", 1}, {"K/s", 1e3}, {"k/s", 1e3}, {"M/s", 1e6}, {"G/s", 1e9}};
  static const std::vector<UnitDef> none = {};
  switch (d) {
    case Dimension::Bytes: return bytes;
    case Dimension::Bandwidth: return bandwidth;
    case Dimension::Time: return time;
    case Dimension::Frequency: return frequency;
    case Dimension::Throughput: return throughput;
    case Dimension::Cycles: return cycles;
    case Dimension::Rate: return rate;
    default: return none;
  }
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

}  // namespace

const char* dimensionName(Dimension d) {
  switch (d) {
    case Dimension::Count: return "count";
    case Dimension::Fraction: return "fraction";
    case Dimension::Bytes: return "size";
    case Dimension::Bandwidth: return "bandwidth";
    case Dimension::Time: return "time";
    case Dimension::Frequency: return "frequency";
    case Dimension::Throughput: return "throughput";
    case Dimension::Cycles: return "cycle count";
    case Dimension::Number: return "number";
    case Dimension::Rate: return "rate";
  }
  return "?";
}

const char* dimensionExample(Dimension d) {
  switch (d) {
    case Dimension::Count: return "8";
    case Dimension::Fraction: return "0.8";
    case Dimension::Bytes: return "24 GiB";
    case Dimension::Bandwidth: return "3.2TB/s";
    case Dimension::Time: return "1.5 us";
    case Dimension::Frequency: return "1.3 GHz";
    case Dimension::Throughput: return "96 TFLOPS";
    case Dimension::Cycles: return "100 cycles";
    case Dimension::Number: return "1.5";
    case Dimension::Rate: return "215 M/s";
  }
  return "?";
}

namespace {
constexpr double kMaxTimeSeconds = 1e6;
}  // namespace

std::optional<double> parseQuantity(const std::string& raw, Dimension d, std::string* why) {
  const std::string text = trim(raw);
  auto fail = [&](const std::string& msg) -> std::optional<double> {
    if (why) *why = msg;
    return std::nullopt;
  };
  if (text.empty()) return fail("empty value");
  // Decimal only: strtod would also read hexadecimal ("0x10 GB/s" as 16 GB/s) and "inf"/"nan".
  {
    const size_t at = text[0] == '-' || text[0] == '+' ? 1 : 0;
    if (text.size() > at + 1 && text[at] == '0' && (text[at + 1] == 'x' || text[at + 1] == 'X'))
      return fail("\"" + text + "\" is hexadecimal; give a decimal number");
  }
  const char* begin = text.c_str();
  char* end = nullptr;
  const double number = std::strtod(begin, &end);
  if (end == begin) return fail("\"" + text + "\" does not start with a number");
  if (!std::isfinite(number)) return fail("\"" + text + "\" is not a finite number");
  const std::string unit = trim(std::string(end));

  if (d == Dimension::Count) {
    // Plain decimal digits only: no exponent, hex or fraction.
    const size_t digits_from = text[0] == '-' || text[0] == '+' ? 1 : 0;
    const bool plain = text.size() > digits_from &&
                       text.find_first_not_of("0123456789", digits_from) == std::string::npos;
    if (!plain) return fail("\"" + text + "\" is not a whole number");
    return number;
  }
  if (d == Dimension::Fraction) {
    if (!unit.empty()) return fail("\"" + text + "\" takes no unit");
    if (!(number > 0.0 && number <= 1.0))
      return fail("\"" + text + "\" is outside (0, 1]");
    return number;
  }
  if (d == Dimension::Number) {
    if (unit.empty()) return number;
    // A ratio as switch vendors write oversubscription: "3:2".
    if (unit[0] == ':') {
      const std::string rest = trim(unit.substr(1));
      char* den_end = nullptr;
      const double den = std::strtod(rest.c_str(), &den_end);
      if (!rest.empty() && trim(den_end).empty() && std::isfinite(den) && den > 0) return number / den;
      return fail("\"" + text + "\" is not a ratio like 3:2");
    }
    return fail("\"" + text + "\" takes no unit (a ratio like 3:2 is also read)");
  }
  if (number < 0) return fail("\"" + text + "\" is negative");
  if (unit.empty())
    return fail("\"" + text + "\" has no unit of " + std::string(dimensionName(d)));
  for (const UnitDef& u : unitsFor(d)) {
    if (unit != u.symbol) continue;
    const double value = number * u.scale;
    // Simulated time ends at 2^63 ps (about 107 days): a duration near it would wrap, and
    // no card's figure comes close. (A smaller one that overflows is a TimeOverflow.)
    if (d == Dimension::Time && value > kMaxTimeSeconds)
      return fail("\"" + text + "\" is over 1e6 s (simulated time ends at 2^63 ps, about 107 days)");
    return value;
  }
  std::string valid;
  for (const UnitDef& u : unitsFor(d)) valid += (valid.empty() ? "" : ", ") + std::string(u.symbol);
  return fail("\"" + text + "\": unit \"" + unit + "\" is not a " + dimensionName(d) +
              " unit (valid: " + valid + ")");
}

}  // namespace cardsim::sim
