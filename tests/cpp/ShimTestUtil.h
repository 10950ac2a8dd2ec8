// Helpers shared by the driver-shim test suites.
#pragma once

#include <gtest/gtest.h>

#include <cardsim/shim.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "simulator/Config.h"

namespace cardsim::testing {

// AddressSanitizer (freed memory in quarantine) and ThreadSanitizer (its own allocator and
// shadow memory) make resident-set checks meaningless: they run in the regular build.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kResidentSetMeaningful = false;
#else
constexpr bool kResidentSetMeaningful = true;
#endif

// This process's resident set size in bytes (/proc/self/statm's second field, in pages).
inline long residentBytes() {
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return pages_resident * sysconf(_SC_PAGESIZE);
}

#define ASSERT_SHIM_OK(call)                                 \
  do {                                                       \
    const ::cardsim::shim::Status s_ = (call);               \
    ASSERT_TRUE(s_.ok()) << #call << " -> " << s_.toString(); \
  } while (0)
#define EXPECT_SHIM_OK(call)                                 \
  do {                                                       \
    const ::cardsim::shim::Status s_ = (call);               \
    EXPECT_TRUE(s_.ok()) << #call << " -> " << s_.toString(); \
  } while (0)

// Starts the runtime with a preset and device count; the parameters it simulates.
inline model::DeviceParams startRuntime(const std::string& preset, uint32_t devices,
                                        std::vector<std::string> overrides = {}) {
  shim::InitOptions o;
  o.backend = "sim";
  o.preset = preset;
  o.devices = devices;
  o.overrides = overrides;
  shim::Status s = shim::initialize(o);
  EXPECT_TRUE(s.ok()) << s.toString();
  sim::SimOptions so;
  so.preset = preset;
  so.devices = devices;
  so.overrides = overrides;
  return sim::loadDeviceParams(so);
}

inline std::vector<shim::ActivityRecord> drain() {
  std::vector<shim::ActivityRecord> out;
  EXPECT_TRUE(shim::drainActivities(&out).ok());
  return out;
}

// The activity records of one kind named `name`.
inline std::vector<shim::ActivityRecord> named(const std::vector<shim::ActivityRecord>& all,
                                               const std::string& name) {
  std::vector<shim::ActivityRecord> out;
  std::copy_if(all.begin(), all.end(), std::back_inserter(out),
               [&](const shim::ActivityRecord& a) { return a.name == name; });
  return out;
}

// An elementwise kernel moving `bytes` (half read, half written) at one op per 4-byte
// element: far below the ridge point, so memory-bound.
inline shim::KernelCost memoryBound(double bytes, uint32_t tiles) {
  shim::KernelCost c;
  c.kernel_class = shim::KernelClass::Elementwise;
  c.dtype = shim::DataType::Float32;
  c.bytes_read = bytes / 2;
  c.bytes_written = bytes / 2;
  c.flops = bytes / 8;
  c.tiles = tiles;
  return c;
}

inline double seconds(uint64_t ps) { return static_cast<double>(ps) * 1e-12; }
inline double durationS(const shim::ActivityRecord& a) { return seconds(a.end_ps - a.start_ps); }

}  // namespace cardsim::testing
