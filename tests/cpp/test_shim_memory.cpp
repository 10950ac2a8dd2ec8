// Devices, properties, memory capacity and lazy backing, copies and their data, errors.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "ShimTestUtil.h"

namespace shim = cardsim::shim;
using namespace cardsim::testing;

TEST(ShimDevices, CountAndPropertiesComeFromThePreset) {
  auto p = startRuntime("mlu370-x8", 4);
  int n = 0;
  ASSERT_SHIM_OK(shim::getDeviceCount(&n));
  EXPECT_EQ(n, 4);
  shim::DeviceProperties props;
  ASSERT_SHIM_OK(shim::getDeviceProperties(&props, 3));
  EXPECT_EQ(props.name, "MLU370-X8");
  EXPECT_EQ(props.total_memory_bytes, 23374ull << 20);
  EXPECT_EQ(props.cluster_count, p.compute.clusters);
  EXPECT_DOUBLE_EQ(props.memory_bandwidth_bytes_per_s, 307.2e9);
  EXPECT_DOUBLE_EQ(props.peak_fp32_flops, 12e12);
  EXPECT_EQ(props.peak_tf32_flops, 0);
  EXPECT_EQ(props.pcie_generation, 4u);
  int least = 0, greatest = 0;
  ASSERT_SHIM_OK(shim::deviceGetStreamPriorityRange(&least, &greatest));
  EXPECT_EQ(least, 7);
  EXPECT_EQ(greatest, 0);
  EXPECT_EQ(shim::backendName(), "sim");
}

TEST(ShimDevices, InvalidDeviceIndexIsNamed) {
  startRuntime("mlu370-x8", 2);
  shim::Status s = shim::setDevice(5);
  EXPECT_EQ(s.code(), shim::Code::InvalidDevice);
  EXPECT_NE(s.message().find("invalid device 5"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("2 device(s)"), std::string::npos) << s.message();
  shim::DeviceProperties props;
  EXPECT_EQ(shim::getDeviceProperties(&props, -1).code(), shim::Code::InvalidDevice);
  // The last error is sticky until read, then cleared.
  EXPECT_EQ(shim::getLastError().code(), shim::Code::InvalidDevice);
  EXPECT_TRUE(shim::getLastError().ok());
  int d = -1;
  ASSERT_SHIM_OK(shim::getDevice(&d));
  EXPECT_EQ(d, 0);  // unchanged by the failed call
}

TEST(ShimInit, UnknownPresetListsValidOnesAndTheProcessStaysUsable) {
  shim::InitOptions bad;
  bad.preset = "mlu999";
  shim::Status s = shim::initialize(bad);
  EXPECT_EQ(s.code(), shim::Code::InitFailed);
  for (const char* name : {"mlu370-x8", "mlu370-x4", "mlu590", "br100", "br104", "h100-sxm", "a100-sxm", "h200-sxm"})
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("mlu999"), std::string::npos);
  startRuntime("br104", 1);
  shim::DeviceProperties props;
  ASSERT_SHIM_OK(shim::getDeviceProperties(&props, 0));
  EXPECT_EQ(props.name, "BR104");
}

TEST(ShimInit, UnknownBackendListsValidOnes) {
  shim::InitOptions o;
  o.backend = "cuda";
  shim::Status s = shim::initialize(o);
  EXPECT_EQ(s.code(), shim::Code::InitFailed);
  EXPECT_NE(s.message().find("\"cuda\""), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("sim, native"), std::string::npos) << s.message();
}

TEST(ShimInit, NativeBackendWithoutVendorRuntimeSaysWhatItLookedFor) {
  shim::InitOptions o;
  o.backend = "native";
  shim::Status s = shim::initialize(o);
  EXPECT_FALSE(s.ok());
  // The default preset is an MLU: CNRT is what it looks for.
  EXPECT_NE(s.message().find("libcnrt.so"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("NEUWARE_HOME"), std::string::npos) << s.message();
}

TEST(ShimInit, SecondConfigurationInOneProcessIsRefused) {
  startRuntime("mlu370-x8", 1);
  shim::InitOptions other;
  other.preset = "br100";
  other.devices = 1;
  shim::Status s = shim::initialize(other);
  EXPECT_EQ(s.code(), shim::Code::InitFailed);
  EXPECT_NE(s.message().find("already running"), std::string::npos) << s.message();
  int n = 0;
  ASSERT_SHIM_OK(shim::getDeviceCount(&n));
  EXPECT_EQ(n, 1);
}

TEST(ShimMemory, AllocationAccountingAndMemGetInfo) {
  startRuntime("mlu370-x8", 1);
  size_t free0 = 0, total = 0;
  ASSERT_SHIM_OK(shim::memGetInfo(&free0, &total));
  EXPECT_EQ(total, 23374ull << 20);
  EXPECT_EQ(free0, total);
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_SHIM_OK(shim::malloc(&a, 1000));          // rounds to 1024
  ASSERT_SHIM_OK(shim::malloc(&b, 1 << 20));
  size_t free1 = 0;
  ASSERT_SHIM_OK(shim::memGetInfo(&free1, &total));
  EXPECT_EQ(free0 - free1, 1024u + (1u << 20));
  ASSERT_SHIM_OK(shim::free(a));
  ASSERT_SHIM_OK(shim::free(b));
  ASSERT_SHIM_OK(shim::memGetInfo(&free1, &total));
  EXPECT_EQ(free1, free0);
  void* z = reinterpret_cast<void*>(0x1);
  ASSERT_SHIM_OK(shim::malloc(&z, 0));
  EXPECT_EQ(z, nullptr);
}

TEST(ShimMemory, BeyondCapacityFailsClearlyAndTheShimStaysUsable) {
  startRuntime("mlu370-x8", 1);
  void* big = nullptr;
  ASSERT_SHIM_OK(shim::malloc(&big, 20ull << 30));
  void* more = nullptr;
  shim::Status s = shim::malloc(&more, 4ull << 30);
  EXPECT_EQ(s.code(), shim::Code::OutOfMemory);
  EXPECT_EQ(more, nullptr);
  for (const char* part : {"device 0", "MLU370-X8", "4.00 GiB", "free", "total"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " not in: " << s.message();
  // Still usable: a fitting allocation and a copy work.
  void* small = nullptr;
  ASSERT_SHIM_OK(shim::malloc(&small, 4096));
  std::vector<uint8_t> in(4096, 7), out(4096, 0);
  ASSERT_SHIM_OK(shim::memcpy(small, in.data(), in.size(), shim::MemcpyKind::HostToDevice));
  ASSERT_SHIM_OK(shim::memcpy(out.data(), small, out.size(), shim::MemcpyKind::DeviceToHost));
  EXPECT_EQ(in, out);
  ASSERT_SHIM_OK(shim::free(big));
  ASSERT_SHIM_OK(shim::malloc(&more, 4ull << 30));
  ASSERT_SHIM_OK(shim::free(more));
  ASSERT_SHIM_OK(shim::free(small));
}

TEST(ShimMemory, CardsLargerThanTheHostAreBackedLazily) {
  // Two 64 GB cards on a host with less memory: only touched bytes cost host memory.
  startRuntime("br100", 2);
  const size_t bytes = 55ull << 30;  // of 64 GB (59.6 GiB) per card
  void* p[2] = {nullptr, nullptr};
  const long rss0 = residentBytes();
  for (int d = 0; d < 2; ++d) {
    ASSERT_SHIM_OK(shim::setDevice(d));
    ASSERT_SHIM_OK(shim::malloc(&p[d], bytes));
    uint8_t* bytes_p = static_cast<uint8_t*>(p[d]);
    ASSERT_SHIM_OK(shim::memset(bytes_p + bytes - 4096, 0xab, 4096));
    uint8_t tail[16];
    ASSERT_SHIM_OK(shim::memcpy(tail, bytes_p + bytes - 16, 16, shim::MemcpyKind::DeviceToHost));
    for (uint8_t v : tail) EXPECT_EQ(v, 0xab);
  }
  // (The sanitizers' shadow memory and allocators move the resident set on their own.)
  if (kResidentSetMeaningful) {
    EXPECT_LT(residentBytes() - rss0, 64l << 20);
  }
  size_t free_b = 0, total = 0;
  ASSERT_SHIM_OK(shim::memGetInfo(&free_b, &total));
  EXPECT_EQ(total - free_b, bytes);
  for (int d = 0; d < 2; ++d) ASSERT_SHIM_OK(shim::free(p[d]));
}

TEST(ShimMemory, CopiesMoveTheBytesInEveryDirection) {
  startRuntime("mlu370-x8", 2);
  const size_t n = 1 << 16;
  std::vector<uint32_t> host(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<uint32_t>(i * 2654435761u);
  void *d0a, *d0b, *d1;
  ASSERT_SHIM_OK(shim::malloc(&d0a, n * 4));
  ASSERT_SHIM_OK(shim::malloc(&d0b, n * 4));
  ASSERT_SHIM_OK(shim::setDevice(1));
  ASSERT_SHIM_OK(shim::malloc(&d1, n * 4));
  ASSERT_SHIM_OK(shim::setDevice(0));
  ASSERT_SHIM_OK(shim::memcpy(d0a, host.data(), n * 4, shim::MemcpyKind::HostToDevice));
  ASSERT_SHIM_OK(shim::memcpy(d0b, d0a, n * 4, shim::MemcpyKind::DeviceToDevice));
  ASSERT_SHIM_OK(shim::memcpyPeerAsync(d1, 1, d0b, 0, n * 4, nullptr));
  ASSERT_SHIM_OK(shim::streamSynchronize(nullptr));
  ASSERT_SHIM_OK(shim::memcpy(back.data(), d1, n * 4, shim::MemcpyKind::Default));
  EXPECT_EQ(back, host);
  ASSERT_SHIM_OK(shim::memset(d0a, 0x5a, 100));
  ASSERT_SHIM_OK(shim::memcpy(back.data(), d0a, 100, shim::MemcpyKind::DeviceToHost));
  const uint8_t* bb = reinterpret_cast<const uint8_t*>(back.data());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(bb[i], 0x5a);
  shim::PointerAttributes attr;
  ASSERT_SHIM_OK(shim::pointerGetAttributes(&attr, static_cast<uint8_t*>(d1) + 10));
  EXPECT_EQ(attr.type, shim::PointerAttributes::Type::Device);
  EXPECT_EQ(attr.device, 1);
  EXPECT_EQ(attr.base, d1);
  EXPECT_EQ(attr.size, n * 4);
  ASSERT_SHIM_OK(shim::pointerGetAttributes(&attr, host.data()));
  EXPECT_EQ(attr.type, shim::PointerAttributes::Type::Unregistered);
}

TEST(ShimMemory, BadPointersAndRangesAreNamed) {
  startRuntime("mlu370-x8", 1);
  void* d = nullptr;
  ASSERT_SHIM_OK(shim::malloc(&d, 1024));
  std::vector<uint8_t> host(4096);
  shim::Status s = shim::memcpy(host.data(), host.data() + 8, 8, shim::MemcpyKind::DeviceToHost);
  EXPECT_EQ(s.code(), shim::Code::InvalidValue);
  EXPECT_NE(s.message().find("source"), std::string::npos) << s.message();
  s = shim::memcpy(d, host.data(), 2048, shim::MemcpyKind::HostToDevice);
  EXPECT_EQ(s.code(), shim::Code::InvalidValue);
  EXPECT_NE(s.message().find("2048 bytes"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("1024 bytes"), std::string::npos) << s.message();
  s = shim::memcpy(d, host.data(), 16, shim::MemcpyKind::DeviceToHost);
  EXPECT_EQ(s.code(), shim::Code::InvalidValue);
  s = shim::free(static_cast<uint8_t*>(d) + 16);
  EXPECT_EQ(s.code(), shim::Code::InvalidValue);
  ASSERT_SHIM_OK(shim::free(d));
  s = shim::free(d);
  EXPECT_EQ(s.code(), shim::Code::InvalidValue);
  EXPECT_NE(s.message().find("already freed"), std::string::npos) << s.message();
}

TEST(ShimInit, AForkedChildGetsAClearErrorAndExitsCleanly) {
  startRuntime("mlu370-x8", 1);
  void* d = nullptr;
  ASSERT_SHIM_OK(shim::malloc(&d, 4096));
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int n = 0;
    shim::Status s = shim::getDeviceCount(&n);
    const bool clear = s.code() == shim::Code::InitFailed &&
                       s.message().find("forked") != std::string::npos;
    std::exit(clear ? 0 : 3);  // exit(), not _exit(): the inherited atexit handlers run
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The parent is unaffected.
  ASSERT_SHIM_OK(shim::memset(d, 1, 4096));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  ASSERT_SHIM_OK(shim::free(d));
}
