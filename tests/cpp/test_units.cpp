// Tests for simulator/Units.h: parsing quantities with explicit units.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "simulator/Units.h"

namespace {

using cardsim::sim::Dimension;
using cardsim::sim::dimensionName;
using cardsim::sim::parseQuantity;

constexpr double kKiB = 1024.0;
constexpr double kMiB = kKiB * 1024.0;
constexpr double kGiB = kMiB * 1024.0;
constexpr double kTiB = kGiB * 1024.0;

// Parses and expects success; returns the value (NaN on failure, with the reason).
double ok(const std::string& text, Dimension d) {
  std::string why = "<untouched>";
  std::optional<double> v = parseQuantity(text, d, &why);
  EXPECT_TRUE(v.has_value()) << "\"" << text << "\" as " << dimensionName(d)
                             << " failed: " << why;
  return v ? *v : std::nan("");
}

// Parses and expects failure; returns the reason.
std::string err(const std::string& text, Dimension d) {
  std::string why;
  std::optional<double> v = parseQuantity(text, d, &why);
  EXPECT_FALSE(v.has_value()) << "\"" << text << "\" as " << dimensionName(d)
                              << " unexpectedly parsed as " << *v;
  EXPECT_FALSE(why.empty()) << "no reason given for rejecting \"" << text << "\"";
  return why;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// ---- dimensionName ---------------------------------------------------------------------

TEST(DimensionName, NamesEveryDimension) {
  EXPECT_STREQ(dimensionName(Dimension::Count), "count");
  EXPECT_STREQ(dimensionName(Dimension::Fraction), "fraction");
  EXPECT_STREQ(dimensionName(Dimension::Bytes), "size");
  EXPECT_STREQ(dimensionName(Dimension::Bandwidth), "bandwidth");
  EXPECT_STREQ(dimensionName(Dimension::Time), "time");
  EXPECT_STREQ(dimensionName(Dimension::Frequency), "frequency");
  EXPECT_STREQ(dimensionName(Dimension::Throughput), "throughput");
}

TEST(DimensionName, NamesAreDistinct) {
  const std::vector<Dimension> all = {Dimension::Count,     Dimension::Fraction,
                                      Dimension::Bytes,     Dimension::Bandwidth,
                                      Dimension::Time,      Dimension::Frequency,
                                      Dimension::Throughput};
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = i + 1; j < all.size(); ++j)
      EXPECT_STRNE(dimensionName(all[i]), dimensionName(all[j]));
}

// ---- Bytes -----------------------------------------------------------------------------

TEST(ParseQuantityBytes, DecimalPrefixes) {
  EXPECT_DOUBLE_EQ(ok("512 B", Dimension::Bytes), 512.0);
  EXPECT_DOUBLE_EQ(ok("4 KB", Dimension::Bytes), 4e3);
  EXPECT_DOUBLE_EQ(ok("4 kB", Dimension::Bytes), 4e3);
  EXPECT_DOUBLE_EQ(ok("100 MB", Dimension::Bytes), 100e6);
  EXPECT_DOUBLE_EQ(ok("48 GB", Dimension::Bytes), 48e9);
  EXPECT_DOUBLE_EQ(ok("64 GB", Dimension::Bytes), 64e9);
  EXPECT_DOUBLE_EQ(ok("2 TB", Dimension::Bytes), 2e12);
}

TEST(ParseQuantityBytes, BinaryPrefixes) {
  EXPECT_DOUBLE_EQ(ok("512 KiB", Dimension::Bytes), 512 * kKiB);
  EXPECT_DOUBLE_EQ(ok("23374 MiB", Dimension::Bytes), 23374.0 * std::ldexp(1.0, 20));
  EXPECT_DOUBLE_EQ(ok("24 GiB", Dimension::Bytes), 24 * kGiB);
  EXPECT_DOUBLE_EQ(ok("1 TiB", Dimension::Bytes), kTiB);
  // Binary and decimal prefixes differ.
  EXPECT_NE(ok("1 GiB", Dimension::Bytes), ok("1 GB", Dimension::Bytes));
}

TEST(ParseQuantityBytes, ToleratesSurroundingWhitespaceAndNoSpace) {
  EXPECT_DOUBLE_EQ(ok("  24 GiB  ", Dimension::Bytes), 24 * kGiB);
  EXPECT_DOUBLE_EQ(ok("24GiB", Dimension::Bytes), 24 * kGiB);
  EXPECT_DOUBLE_EQ(ok("0 B", Dimension::Bytes), 0.0);
}

// ---- Bandwidth -------------------------------------------------------------------------

TEST(ParseQuantityBandwidth, DecimalPrefixes) {
  EXPECT_DOUBLE_EQ(ok("614.4 GB/s", Dimension::Bandwidth), 614.4e9);
  EXPECT_DOUBLE_EQ(ok("307.2 GB/s", Dimension::Bandwidth), 307.2e9);
  EXPECT_DOUBLE_EQ(ok("1.64 TB/s", Dimension::Bandwidth), 1.64e12);
  EXPECT_DOUBLE_EQ(ok("250 MB/s", Dimension::Bandwidth), 250e6);
  EXPECT_DOUBLE_EQ(ok("8 KB/s", Dimension::Bandwidth), 8e3);
  EXPECT_DOUBLE_EQ(ok("8 kB/s", Dimension::Bandwidth), 8e3);
  EXPECT_DOUBLE_EQ(ok("10 B/s", Dimension::Bandwidth), 10.0);
}

TEST(ParseQuantityBandwidth, NoSpaceBetweenNumberAndUnit) {
  EXPECT_DOUBLE_EQ(ok("3.2TB/s", Dimension::Bandwidth), 3.2e12);
}

TEST(ParseQuantityBandwidth, BinaryPrefixes) {
  EXPECT_DOUBLE_EQ(ok("16 KiB/s", Dimension::Bandwidth), 16 * kKiB);
  EXPECT_DOUBLE_EQ(ok("100 MiB/s", Dimension::Bandwidth), 100 * kMiB);
  EXPECT_DOUBLE_EQ(ok("12 GiB/s", Dimension::Bandwidth), 12 * kGiB);
  EXPECT_DOUBLE_EQ(ok("1 TiB/s", Dimension::Bandwidth), kTiB);
}

TEST(ParseQuantityBandwidth, BitsPerSecondAreEighthsOfBytes) {
  EXPECT_DOUBLE_EQ(ok("200 Gb/s", Dimension::Bandwidth), 25e9);
  EXPECT_DOUBLE_EQ(ok("800 Mb/s", Dimension::Bandwidth), 100e6);
  EXPECT_DOUBLE_EQ(ok("1.6 Tb/s", Dimension::Bandwidth), 0.2e12);
  // "Gb/s" (bits) and "GB/s" (bytes) must not be confused.
  EXPECT_DOUBLE_EQ(ok("8 GB/s", Dimension::Bandwidth), 8 * ok("8 Gb/s", Dimension::Bandwidth));
}

// ---- Time ------------------------------------------------------------------------------

TEST(ParseQuantityTime, AllUnits) {
  EXPECT_DOUBLE_EQ(ok("1.5 us", Dimension::Time), 1.5e-6);
  EXPECT_DOUBLE_EQ(ok("500 ns", Dimension::Time), 500e-9);
  EXPECT_DOUBLE_EQ(ok("250 ps", Dimension::Time), 250e-12);
  EXPECT_DOUBLE_EQ(ok("3 ms", Dimension::Time), 3e-3);
  EXPECT_DOUBLE_EQ(ok("2 s", Dimension::Time), 2.0);
  EXPECT_DOUBLE_EQ(ok("0.5us", Dimension::Time), 0.5e-6);
  EXPECT_DOUBLE_EQ(ok("0 us", Dimension::Time), 0.0);  // zero is a valid time; callers check > 0
  EXPECT_DOUBLE_EQ(ok("4 \u00b5s", Dimension::Time), 4e-6);   // micro sign, as the docs write it
  EXPECT_DOUBLE_EQ(ok("4\u03bcs", Dimension::Time), 4e-6);    // Greek mu
}

TEST(ParseQuantity, HexadecimalIsRefusedNamingIt) {
  std::string why;
  EXPECT_FALSE(parseQuantity("0x10 GB/s", Dimension::Bandwidth, &why).has_value());
  EXPECT_NE(why.find("hexadecimal"), std::string::npos) << why;
  EXPECT_FALSE(parseQuantity("-0X1 s", Dimension::Time, nullptr).has_value());
  EXPECT_DOUBLE_EQ(ok("0.5 GB/s", Dimension::Bandwidth), 0.5e9);   // a decimal starting with 0 is fine
}

// ---- Frequency -------------------------------------------------------------------------

TEST(ParseQuantityFrequency, AllUnits) {
  EXPECT_DOUBLE_EQ(ok("1.3 GHz", Dimension::Frequency), 1.3e9);
  EXPECT_DOUBLE_EQ(ok("1.98 GHz", Dimension::Frequency), 1.98e9);
  EXPECT_DOUBLE_EQ(ok("800 MHz", Dimension::Frequency), 800e6);
  EXPECT_DOUBLE_EQ(ok("32 kHz", Dimension::Frequency), 32e3);
  EXPECT_DOUBLE_EQ(ok("50 Hz", Dimension::Frequency), 50.0);
}

// ---- Throughput ------------------------------------------------------------------------

TEST(ParseQuantityThroughput, FlopsAndOps) {
  EXPECT_DOUBLE_EQ(ok("96 TFLOPS", Dimension::Throughput), 96e12);
  EXPECT_DOUBLE_EQ(ok("256 TOPS", Dimension::Throughput), 256e12);
  EXPECT_DOUBLE_EQ(ok("66.9 TFLOPS", Dimension::Throughput), 66.9e12);
  EXPECT_DOUBLE_EQ(ok("500 GFLOPS", Dimension::Throughput), 500e9);
  EXPECT_DOUBLE_EQ(ok("2 PFLOPS", Dimension::Throughput), 2e15);
  EXPECT_DOUBLE_EQ(ok("10 FLOPS", Dimension::Throughput), 10.0);
  EXPECT_DOUBLE_EQ(ok("300 GOPS", Dimension::Throughput), 300e9);
  EXPECT_DOUBLE_EQ(ok("1.5 POPS", Dimension::Throughput), 1.5e15);
  EXPECT_DOUBLE_EQ(ok("7 OPS", Dimension::Throughput), 7.0);
  EXPECT_DOUBLE_EQ(ok("0 TFLOPS", Dimension::Throughput), 0.0);  // "unsupported"
}

// ---- Count -----------------------------------------------------------------------------

TEST(ParseQuantityCount, WholeNumbersIncludingNegative) {
  EXPECT_DOUBLE_EQ(ok("8", Dimension::Count), 8.0);
  EXPECT_DOUBLE_EQ(ok("0", Dimension::Count), 0.0);
  EXPECT_DOUBLE_EQ(ok("-5", Dimension::Count), -5.0);
  EXPECT_DOUBLE_EQ(ok("-3", Dimension::Count), -3.0);
  EXPECT_DOUBLE_EQ(ok(" 132 ", Dimension::Count), 132.0);
}

TEST(ParseQuantityCount, RejectsNonInteger) {
  const std::string why = err("2.5", Dimension::Count);
  EXPECT_TRUE(contains(why, "2.5")) << why;
  EXPECT_TRUE(contains(why, "whole number")) << why;
  err("-0.5", Dimension::Count);
}

TEST(ParseQuantityCount, RejectsUnit) {
  const std::string why = err("8 GB", Dimension::Count);
  EXPECT_TRUE(contains(why, "8 GB")) << why;
}

// ---- Fraction --------------------------------------------------------------------------

TEST(ParseQuantityFraction, AcceptsHalfOpenUnitInterval) {
  EXPECT_DOUBLE_EQ(ok("0.8", Dimension::Fraction), 0.8);
  EXPECT_DOUBLE_EQ(ok("1", Dimension::Fraction), 1.0);
  EXPECT_DOUBLE_EQ(ok("1.0", Dimension::Fraction), 1.0);
  EXPECT_DOUBLE_EQ(ok("0.001", Dimension::Fraction), 0.001);
}

TEST(ParseQuantityFraction, RejectsOutsideHalfOpenUnitInterval) {
  for (const char* bad : {"0", "0.0", "1.01", "1.5", "-0.5", "2"}) {
    const std::string why = err(bad, Dimension::Fraction);
    EXPECT_TRUE(contains(why, "(0, 1]")) << bad << ": " << why;
    EXPECT_TRUE(contains(why, bad)) << bad << ": " << why;
  }
}

TEST(ParseQuantityFraction, RejectsUnit) {
  const std::string why = err("0.8 GB", Dimension::Fraction);
  EXPECT_TRUE(contains(why, "no unit")) << why;
}

// ---- Errors ----------------------------------------------------------------------------

TEST(ParseQuantityErrors, WrongUnitForDimensionNamesUnitAndListsValidOnes) {
  {
    // A size where a bandwidth is expected.
    const std::string why = err("3.2 TB", Dimension::Bandwidth);
    EXPECT_TRUE(contains(why, "\"TB\"")) << why;
    EXPECT_TRUE(contains(why, "bandwidth")) << why;
    for (const char* u : {"B/s", "GB/s", "TB/s", "GiB/s", "Gb/s"})
      EXPECT_TRUE(contains(why, u)) << u << " missing from: " << why;
  }
  {
    // A bandwidth where a size is expected.
    const std::string why = err("307.2 GB/s", Dimension::Bytes);
    EXPECT_TRUE(contains(why, "\"GB/s\"")) << why;
    EXPECT_TRUE(contains(why, "size")) << why;
    for (const char* u : {"KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"})
      EXPECT_TRUE(contains(why, u)) << u << " missing from: " << why;
  }
  {
    const std::string why = err("1.3 GHz", Dimension::Time);
    EXPECT_TRUE(contains(why, "\"GHz\"")) << why;
    for (const char* u : {"ps", "ns", "us", "ms"})
      EXPECT_TRUE(contains(why, u)) << u << " missing from: " << why;
  }
  {
    const std::string why = err("5 us", Dimension::Frequency);
    EXPECT_TRUE(contains(why, "\"us\"")) << why;
    for (const char* u : {"Hz", "kHz", "MHz", "GHz"})
      EXPECT_TRUE(contains(why, u)) << u << " missing from: " << why;
  }
  {
    const std::string why = err("96 TB/s", Dimension::Throughput);
    EXPECT_TRUE(contains(why, "\"TB/s\"")) << why;
    for (const char* u : {"TFLOPS", "TOPS"})
      EXPECT_TRUE(contains(why, u)) << u << " missing from: " << why;
  }
}

TEST(ParseQuantityErrors, UnitsAreCaseSensitive) {
  // "gb/s" is not a unit we know; silently reading it as bits or bytes would be a guess.
  err("10 gb/s", Dimension::Bandwidth);
  err("1 ghz", Dimension::Frequency);
  err("3 US", Dimension::Time);
}

TEST(ParseQuantityErrors, MissingUnit) {
  for (Dimension d : {Dimension::Bytes, Dimension::Bandwidth, Dimension::Time,
                      Dimension::Frequency, Dimension::Throughput}) {
    const std::string why = err("614.4", d);
    EXPECT_TRUE(contains(why, "no unit")) << dimensionName(d) << ": " << why;
    EXPECT_TRUE(contains(why, dimensionName(d))) << why;
  }
}

TEST(ParseQuantityErrors, NegativeRejectedForPhysicalQuantities) {
  const std::vector<std::pair<const char*, Dimension>> cases = {
      {"-1 GB", Dimension::Bytes},       {"-614.4 GB/s", Dimension::Bandwidth},
      {"-1.5 us", Dimension::Time},      {"-1.3 GHz", Dimension::Frequency},
      {"-96 TFLOPS", Dimension::Throughput}};
  for (const auto& [text, d] : cases) {
    const std::string why = err(text, d);
    EXPECT_TRUE(contains(why, "negative")) << text << ": " << why;
  }
}

TEST(ParseQuantityErrors, GarbageText) {
  for (Dimension d : {Dimension::Count, Dimension::Fraction, Dimension::Bytes,
                      Dimension::Bandwidth, Dimension::Time, Dimension::Frequency,
                      Dimension::Throughput}) {
    for (const char* bad : {"abc", "GB/s 12", "fast", "", "   "}) {
      std::string why;
      EXPECT_FALSE(parseQuantity(bad, d, &why).has_value())
          << "\"" << bad << "\" as " << dimensionName(d);
      EXPECT_FALSE(why.empty());
    }
  }
  const std::string why = err("abc", Dimension::Bandwidth);
  EXPECT_TRUE(contains(why, "abc")) << why;
  EXPECT_TRUE(contains(why, "number")) << why;
  EXPECT_TRUE(contains(err("", Dimension::Time), "empty")) << err("", Dimension::Time);
}

TEST(ParseQuantityErrors, TrailingGarbageAfterUnit) {
  err("12 GB/s extra", Dimension::Bandwidth);
  err("12 GB/ss", Dimension::Bandwidth);
  err("12 GB GB", Dimension::Bytes);
}

TEST(ParseQuantityErrors, NonFiniteNumbers) {
  err("inf GB/s", Dimension::Bandwidth);
  err("nan us", Dimension::Time);
  err("inf", Dimension::Count);
  err("nan", Dimension::Fraction);
}

TEST(ParseQuantityNumber, PlainNumbersAndRatios) {
  EXPECT_DOUBLE_EQ(ok("1.5", Dimension::Number), 1.5);
  EXPECT_DOUBLE_EQ(ok("2", Dimension::Number), 2.0);
  EXPECT_DOUBLE_EQ(ok("3:2", Dimension::Number), 1.5);
  EXPECT_DOUBLE_EQ(ok("4 : 1", Dimension::Number), 4.0);
  err("1.5 GB", Dimension::Number);
  err("3:0", Dimension::Number);
  err("3:x", Dimension::Number);
  err("3:2:1", Dimension::Number);
  EXPECT_STREQ(dimensionName(Dimension::Number), "number");
}

TEST(ParseQuantityRate, PerSecondPrefixes) {
  EXPECT_DOUBLE_EQ(ok("215 M/s", Dimension::Rate), 215e6);
  EXPECT_DOUBLE_EQ(ok("1 G/s", Dimension::Rate), 1e9);
  EXPECT_DOUBLE_EQ(ok("5 k/s", Dimension::Rate), 5e3);
  EXPECT_DOUBLE_EQ(ok("7 /s", Dimension::Rate), 7.0);
  err("215", Dimension::Rate);
  err("215 MHz", Dimension::Rate);
  err("-1 M/s", Dimension::Rate);
  EXPECT_STREQ(dimensionName(Dimension::Rate), "rate");
}

TEST(ParseQuantityErrors, ATimeNearTheEndOfSimulatedTimeIsRefused) {
  // 2^63 ps is about 107 days: a latency of 1e9 s wrapped into a time shorter than none.
  EXPECT_DOUBLE_EQ(ok("1000000 s", Dimension::Time), 1e6);
  EXPECT_TRUE(contains(err("1e9 s", Dimension::Time), "\"1e9 s\" is over 1e6 s"));
  EXPECT_TRUE(contains(err("1000001 s", Dimension::Time), "2^63 ps"));
}

TEST(ParseQuantityErrors, NullWhyIsAllowed) {
  EXPECT_FALSE(parseQuantity("abc", Dimension::Time, nullptr).has_value());
  std::optional<double> v = parseQuantity("2 us", Dimension::Time, nullptr);
  ASSERT_TRUE(v.has_value());
  EXPECT_DOUBLE_EQ(*v, 2e-6);
}

}  // namespace
