// Timing mode's carried host data (shim.h, driver_shim/src/CarriedData.h): small copies from
// the host keep their bytes and read back, larger ones and everything computed read as zeros,
// and memory handed out again is scrubbed.
#include <cstring>
#include <vector>

#include "CarriedData.h"
#include "ShimTestUtil.h"

namespace cardsim {
namespace {

using shim::simbackend::CarriedData;
using namespace cardsim::testing;

// One MLU370-X8 chip on the emulator, in `execution` mode.
shim::InitOptions oneChip(const char* execution, bool move_data = true) {
  shim::InitOptions o;
  o.backend = "sim";
  o.preset = "mlu370-x8";
  o.devices = 1;
  o.execution = execution;
  o.move_data = move_data;
  return o;
}

TEST(CarriedData, ScrubZeroesTheRangesNotedWithinAndLeavesTheRest) {
  std::vector<unsigned char> mem(256, 0xAB);
  CarriedData c;
  c.note(mem.data() + 10, 10);
  c.note(mem.data() + 15, 10);    // overlaps: one range [10, 25)
  c.note(mem.data() + 25, 5);     // touches only: its own range (may be the next allocation's)
  c.note(mem.data() + 100, 8);
  EXPECT_EQ(c.rangesHeld(), 3u);
  EXPECT_EQ(c.scrub(mem.data(), 25), 15u);   // [10, 25) starts within [0, 25)
  for (int i = 0; i < 256; ++i) {
    const bool zeroed = i >= 10 && i < 25;
    EXPECT_EQ(mem[i], zeroed ? 0 : 0xAB) << "byte " << i;
  }
  EXPECT_EQ(c.rangesHeld(), 2u);
  EXPECT_EQ(c.scrub(mem.data() + 25, 200), 13u);
  EXPECT_EQ(c.rangesHeld(), 0u);
  EXPECT_EQ(c.scrub(mem.data(), 256), 0u);
}

TEST(TimingCarry, SmallHostDataRoundTripsLargeAndComputedReadZeros) {
  ASSERT_SHIM_OK(shim::initialize(oneChip("timing")));
  const std::size_t small = 4096, large = shim::kTimingCarriedBytes + 4096;
  std::vector<unsigned char> host(large), back(large, 0xEE);
  for (std::size_t i = 0; i < large; ++i) host[i] = static_cast<unsigned char>(1 + i % 251);
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_SHIM_OK(shim::malloc(&a, large));
  ASSERT_SHIM_OK(shim::malloc(&b, large));
  // At most kTimingCarriedBytes: carried both ways.
  ASSERT_SHIM_OK(shim::memcpy(a, host.data(), small, shim::MemcpyKind::HostToDevice));
  ASSERT_SHIM_OK(shim::memcpy(back.data(), a, small, shim::MemcpyKind::DeviceToHost));
  EXPECT_EQ(std::memcmp(back.data(), host.data(), small), 0);
  // Larger: not carried, the host receives zeros.
  ASSERT_SHIM_OK(shim::memcpy(b, host.data(), large, shim::MemcpyKind::HostToDevice));
  ASSERT_SHIM_OK(shim::memcpy(back.data(), b, large, shim::MemcpyKind::DeviceToHost));
  EXPECT_EQ(std::vector<unsigned char>(back.begin(), back.end()), std::vector<unsigned char>(large, 0));
  // A device-to-device copy does no work: what it "computed" reads as zeros.
  ASSERT_SHIM_OK(shim::memcpy(b, a, small, shim::MemcpyKind::DeviceToDevice));
  std::fill(back.begin(), back.end(), 0xEE);
  ASSERT_SHIM_OK(shim::memcpy(back.data(), b, small, shim::MemcpyKind::DeviceToHost));
  EXPECT_EQ(std::vector<unsigned char>(back.begin(), back.begin() + small), std::vector<unsigned char>(small, 0));
  // Written through a host view and noted: scrubbed when the memory is handed out again.
  std::memset(static_cast<unsigned char*>(b) + 64, 7, 32);
  ASSERT_SHIM_OK(shim::timingNoteHostWrite(static_cast<unsigned char*>(b) + 64, 32));
  ASSERT_SHIM_OK(shim::timingScrub(a, large));
  ASSERT_SHIM_OK(shim::timingScrub(b, large));
  for (std::size_t i = 0; i < small; ++i) ASSERT_EQ(static_cast<unsigned char*>(a)[i], 0) << i;
  for (std::size_t i = 64; i < 96; ++i) ASSERT_EQ(static_cast<unsigned char*>(b)[i], 0) << i;
  ASSERT_SHIM_OK(shim::free(a));
  ASSERT_SHIM_OK(shim::free(b));
}

TEST(TimingCarry, FullModeIgnoresNotesAndScrubs) {
  startRuntime("mlu370-x8", 1);
  void* a = nullptr;
  ASSERT_SHIM_OK(shim::malloc(&a, 64));
  std::memset(a, 5, 64);
  ASSERT_SHIM_OK(shim::timingNoteHostWrite(a, 64));
  ASSERT_SHIM_OK(shim::timingScrub(a, 64));
  EXPECT_EQ(static_cast<unsigned char*>(a)[10], 5);   // full mode: memory is the program's
  ASSERT_SHIM_OK(shim::free(a));
}

// A tool re-timing a recording (cardsim replay) moves no bytes at all: not even the small
// host data timing mode carries, so neither side of a copy is touched (the replay reports
// stay what they were with carried data: checked against the golden traces).
TEST(TimingCarry, WithoutMovingDataCopiesTouchNeitherSideAndStillTakeTime) {
  ASSERT_SHIM_OK(shim::initialize(oneChip("timing", /*move_data=*/false)));
  const std::size_t small = 256, large = shim::kTimingCarriedBytes + 4096;
  std::vector<unsigned char> host(large, 0x5A), back(large, 0xEE);
  void* a = nullptr;
  ASSERT_SHIM_OK(shim::malloc(&a, large));
  std::memset(a, 0x11, small);   // stands for whatever the device memory held
  uint64_t t0 = 0, t1 = 0, t2 = 0;
  ASSERT_SHIM_OK(shim::hostTimePs(&t0));
  ASSERT_SHIM_OK(shim::memcpy(a, host.data(), small, shim::MemcpyKind::HostToDevice));
  ASSERT_SHIM_OK(shim::hostTimePs(&t1));
  EXPECT_EQ(static_cast<unsigned char*>(a)[0], 0x11);   // a carried copy would have written 0x5A
  ASSERT_SHIM_OK(shim::memcpy(back.data(), a, small, shim::MemcpyKind::DeviceToHost));
  EXPECT_EQ(back[0], 0xEE);
  ASSERT_SHIM_OK(shim::memcpy(back.data(), a, large, shim::MemcpyKind::DeviceToHost));   // else zeros
  ASSERT_SHIM_OK(shim::hostTimePs(&t2));
  EXPECT_EQ(std::vector<unsigned char>(back.begin(), back.end()), std::vector<unsigned char>(large, 0xEE));
  ASSERT_SHIM_OK(shim::memcpy(back.data(), host.data(), small, shim::MemcpyKind::HostToHost));
  EXPECT_EQ(back[0], 0xEE);
  EXPECT_GT(t1, t0);   // the copies still take their time
  EXPECT_GT(t2, t1);
  ASSERT_SHIM_OK(shim::free(a));
}

TEST(TimingCarry, NotMovingDataNeedsTimingExecution) {
  const shim::Status s = shim::initialize(oneChip("full", /*move_data=*/false));
  EXPECT_EQ(s.code(), shim::Code::InitFailed);
  EXPECT_NE(s.message().find("move_data=false needs timing execution"), std::string::npos) << s.toString();
}

}  // namespace
}  // namespace cardsim
