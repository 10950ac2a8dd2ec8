// The native backend on stand-in vendor runtimes (tests/native_stubs): every symbol
// resolved, arguments in the vendor's order (the stubs reject swapped queues, notifiers and
// directions, and log each call), vendor errors turned into clear Statuses, an incomplete
// library refused by name, CARDSIM_BACKEND=auto falling back to the emulator. Each case
// runs in its own process (gtest_discover_tests), so each may start the runtime its way.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cardsim/shim.h>

#include "ShimTestUtil.h"

namespace shim = cardsim::shim;

namespace {

const std::string kStubs = CARDSIM_STUB_DIR;

struct Stub {
  std::string lib;
  const char* (*log)() = nullptr;
  void (*clear)() = nullptr;
  void (*script)(const char*, int, int) = nullptr;

  explicit Stub(std::string path) : lib(std::move(path)) {
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_NOLOAD);   // the copy the backend loaded
    if (!h) return;
    log = reinterpret_cast<const char* (*)()>(dlsym(h, "cardsimStubLog"));
    clear = reinterpret_cast<void (*)()>(dlsym(h, "cardsimStubClearLog"));
    script = reinterpret_cast<void (*)(const char*, int, int)>(dlsym(h, "cardsimStubScript"));
  }
  std::string calls() const { return log ? log() : ""; }
};

Stub startCnrt(const std::string& home = kStubs + "/neuware") {
  setenv("NEUWARE_HOME", home.c_str(), 1);
  shim::InitOptions o;
  o.backend = "native";
  o.preset = "mlu370-x8";
  const shim::Status s = shim::initialize(o);
  EXPECT_TRUE(s.ok()) << s.toString();
  return Stub(home + "/lib64/libcnrt.so");
}

Stub startSupa() {
  setenv("BIREN_HOME", (kStubs + "/biren").c_str(), 1);
  shim::InitOptions o;
  o.backend = "native";
  o.preset = "br100";
  const shim::Status s = shim::initialize(o);
  EXPECT_TRUE(s.ok()) << s.toString();
  return Stub(kStubs + "/biren/brumd/libsupa.so");
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST(NativeCnrt, BindsAndReportsTheRuntimesDevices) {
  Stub stub = startCnrt();
  ASSERT_NE(stub.log, nullptr) << "the backend did not load " << stub.lib;
  EXPECT_EQ(shim::backendName(), "native");
  int n = 0;
  ASSERT_SHIM_OK(shim::getDeviceCount(&n));
  EXPECT_EQ(n, 2);   // what the stub reports, not the preset's 8
  shim::DeviceProperties p;
  ASSERT_SHIM_OK(shim::getDeviceProperties(&p, 1));
  EXPECT_EQ(p.name, "MLU370-X8 (stub)");
  EXPECT_EQ(p.total_memory_bytes, 16ull << 30);
  EXPECT_EQ(p.cluster_count, 8u);
  EXPECT_EQ(p.cores_per_cluster, 4u);
  EXPECT_EQ(p.compute_capability_major, 3);
  EXPECT_DOUBLE_EQ(p.clock_hz, 1.3e9);
  EXPECT_TRUE(contains(p.backend, "native (CNRT 6.14.1, " + stub.lib + ")")) << p.backend;
  EXPECT_EQ(p.vendor, "Cambricon");
  int least = 0, greatest = 0;
  ASSERT_SHIM_OK(shim::deviceGetStreamPriorityRange(&least, &greatest));
  EXPECT_EQ(least, 7);
  EXPECT_EQ(greatest, 0);
}

TEST(NativeCnrt, CopiesPassTheQueueBeforeTheDirection) {
  Stub stub = startCnrt();
  ASSERT_SHIM_OK(shim::setDevice(1));
  shim::Stream s = nullptr;
  ASSERT_SHIM_OK(shim::streamCreate(&s, 3));
  int prio = -1;
  ASSERT_SHIM_OK(shim::streamGetPriority(s, &prio));
  EXPECT_EQ(prio, 3);
  std::vector<float> host(1000), back(1000, -1.f);
  for (size_t i = 0; i < host.size(); ++i) host[i] = float(i) * 0.5f;
  void* dev = nullptr;
  ASSERT_SHIM_OK(shim::malloc(&dev, 4000));
  shim::PointerAttributes a;
  ASSERT_SHIM_OK(shim::pointerGetAttributes(&a, static_cast<char*>(dev) + 100));
  EXPECT_EQ(a.type, shim::PointerAttributes::Type::Device);
  EXPECT_EQ(a.device, 1);
  EXPECT_EQ(a.base, dev);
  EXPECT_EQ(a.size, 4000u);
  ASSERT_SHIM_OK(shim::memcpyAsync(dev, host.data(), 4000, shim::MemcpyKind::HostToDevice, s));
  ASSERT_SHIM_OK(shim::memsetAsync(dev, 0, 400, s));
  ASSERT_SHIM_OK(shim::memcpyAsync(back.data(), dev, 4000, shim::MemcpyKind::DeviceToHost, s));
  ASSERT_SHIM_OK(shim::streamSynchronize(s));
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(back[i], 0.f);
  for (size_t i = 100; i < back.size(); ++i) ASSERT_EQ(back[i], host[i]);
  const std::string log = stub.calls();
  EXPECT_TRUE(contains(log, "cnrtQueueCreateWithPriority(0,3)")) << log;
  EXPECT_TRUE(contains(log, "cnrtMemcpyAsync(4000,queue=")) << log;
  EXPECT_TRUE(contains(log, ",dir=0)")) << log;   // cnrtMemcpyHostToDev
  EXPECT_TRUE(contains(log, ",dir=2)")) << log;   // cnrtMemcpyDevToHost
  std::size_t free_b = 0, total_b = 0;
  ASSERT_SHIM_OK(shim::memGetInfo(&free_b, &total_b));
  EXPECT_EQ(total_b - free_b, 4000u);
  ASSERT_SHIM_OK(shim::free(dev));
  ASSERT_SHIM_OK(shim::streamDestroy(s));
}

TEST(NativeCnrt, NotifierComesFirstWhenAQueueWaits) {
  Stub stub = startCnrt();
  shim::Stream a = nullptr, b = nullptr;
  ASSERT_SHIM_OK(shim::streamCreate(&a, 0));
  ASSERT_SHIM_OK(shim::streamCreate(&b, 0));
  shim::Event start = nullptr, end = nullptr;
  ASSERT_SHIM_OK(shim::eventCreate(&start, shim::kEventDefault));
  ASSERT_SHIM_OK(shim::eventCreate(&end, shim::kEventDefault));
  ASSERT_SHIM_OK(shim::eventRecord(start, a));
  ASSERT_SHIM_OK(shim::eventRecord(end, a));
  ASSERT_SHIM_OK(shim::streamWaitEvent(b, end));
  ASSERT_SHIM_OK(shim::eventSynchronize(end));
  float ms = -1;
  ASSERT_SHIM_OK(shim::eventElapsedTime(&ms, start, end));
  EXPECT_GE(ms, 0.f);
  const std::string log = stub.calls();
  EXPECT_TRUE(contains(log, "cnrtNotifierCreateWithFlags(0)")) << log;
  // The stub checks the order itself (a queue where the notifier belongs fails); the log
  // shows the call was made, with the wait flag 0.
  EXPECT_TRUE(contains(log, "cnrtQueueWaitNotifier(")) << log;
  EXPECT_TRUE(contains(log, ",0)\n")) << log;
  EXPECT_TRUE(contains(log, "cnrtNotifierElapsedTime(")) << log;
  shim::Event untimed = nullptr;
  ASSERT_SHIM_OK(shim::eventCreate(&untimed, shim::kEventDisableTiming));
  EXPECT_TRUE(contains(stub.calls(), "cnrtNotifierCreateWithFlags(4)"));   // DISABLE_TIMING_ALL
}

TEST(NativeCnrt, VendorErrorsBecomeStatusesNamingCallNameCodeAndMessage) {
  Stub stub = startCnrt();
  ASSERT_NE(stub.script, nullptr);
  struct Case {
    const char* call;
    int code;
    shim::Code expected;
    const char* name;
  };
  const Case cases[] = {
      {"cnrtMalloc", 100100, shim::Code::OutOfMemory, "cnrtErrorNoMem"},
      {"cnrtMalloc", 100006, shim::Code::InvalidValue, "cnrtErrorArgsInvalid"},
      {"cnrtMalloc", 100005, shim::Code::InvalidDevice, "cnrtErrorDeviceInvalid"},
      {"cnrtMalloc", 999991, shim::Code::Internal, "cnrtErrorUnknown"},
  };
  for (const Case& c : cases) {
    stub.script(c.call, c.code, 1);
    void* p = nullptr;
    const shim::Status s = shim::malloc(&p, 64);
    EXPECT_EQ(s.code(), c.expected) << s.toString();
    EXPECT_TRUE(contains(s.message(), std::string("cnrtMalloc failed: ") + c.name + " (" + std::to_string(c.code) + ")"))
        << s.message();
  }
  stub.script("cnrtMalloc", 100100, 1);
  void* p = nullptr;
  EXPECT_TRUE(contains(shim::malloc(&p, 64).message(), ": out of MLU memory"));
  ASSERT_SHIM_OK(shim::malloc(&p, 64));   // the process goes on
  ASSERT_SHIM_OK(shim::free(p));

  shim::Stream s = nullptr;
  ASSERT_SHIM_OK(shim::streamCreate(&s, 0));
  stub.script("cnrtQueueQuery", 632014, 1);   // cnrtErrorBusy: work still running
  EXPECT_EQ(shim::streamQuery(s).code(), shim::Code::NotReady);
  stub.script("cnrtQueueQuery", 1, 1);        // cnrtErrorNotReady
  EXPECT_EQ(shim::streamQuery(s).code(), shim::Code::NotReady);
  ASSERT_SHIM_OK(shim::streamQuery(s));
  std::vector<char> host(16);
  void* dev = nullptr;
  ASSERT_SHIM_OK(shim::malloc(&dev, 16));
  // A direction that does not match the pointers: the stub answers as CNRT would.
  const shim::Status bad = shim::memcpy(dev, host.data(), 16, shim::MemcpyKind::DeviceToHost);
  EXPECT_EQ(bad.code(), shim::Code::InvalidValue);
  EXPECT_TRUE(contains(bad.message(), "cnrtMemcpy failed: cnrtErrorMemcpyDirectionInvalid (632013)")) << bad.message();
}

TEST(NativeCnrt, KernelsRunOnTheHostAfterTheirQueue) {
  Stub stub = startCnrt();
  shim::Stream s = nullptr;
  ASSERT_SHIM_OK(shim::streamCreate(&s, 0));
  int* dev = nullptr;
  ASSERT_SHIM_OK(shim::malloc(reinterpret_cast<void**>(&dev), sizeof(int) * 4));
  ASSERT_SHIM_OK(shim::memsetAsync(dev, 0, sizeof(int) * 4, s));
  stub.clear();
  ASSERT_SHIM_OK(shim::launchKernel(s, "add_one", shim::KernelCost{}, [dev] {
    for (int i = 0; i < 4; ++i) dev[i] += i + 1;
  }));
  EXPECT_TRUE(contains(stub.calls(), "cnrtQueueSync(")) << stub.calls();
  int out[4] = {};
  ASSERT_SHIM_OK(shim::memcpy(out, dev, sizeof out, shim::MemcpyKind::DeviceToHost));
  EXPECT_EQ(out[3], 4);
  const shim::Status failed = shim::launchKernel(s, "boom", shim::KernelCost{}, [] { throw std::runtime_error("bad shape"); });
  EXPECT_EQ(failed.code(), shim::Code::KernelFailed);
  EXPECT_TRUE(contains(failed.message(), "kernel 'boom' failed: bad shape")) << failed.message();
}

TEST(NativeCnrt, CapturedWorkReplaysOnTheVendorQueue) {
  Stub stub = startCnrt();
  shim::Stream s = nullptr;
  ASSERT_SHIM_OK(shim::streamCreate(&s, 0));
  int* dev = nullptr;
  ASSERT_SHIM_OK(shim::malloc(reinterpret_cast<void**>(&dev), sizeof(int)));
  ASSERT_SHIM_OK(shim::memset(dev, 0, sizeof(int)));
  ASSERT_SHIM_OK(shim::streamBeginCapture(s, shim::CaptureMode::Global));
  bool capturing = false;
  ASSERT_SHIM_OK(shim::streamIsCapturing(s, &capturing));
  EXPECT_TRUE(capturing);
  // Synchronizing while a stream captures is refused, and the capture goes on.
  EXPECT_EQ(shim::deviceSynchronize().code(), shim::Code::NotSupported);
  ASSERT_SHIM_OK(shim::launchKernel(s, "inc", shim::KernelCost{}, [dev] { *dev += 1; }));
  int staged = 5;
  ASSERT_SHIM_OK(shim::memcpyAsync(dev, &staged, sizeof(int), shim::MemcpyKind::HostToDevice, s));
  ASSERT_SHIM_OK(shim::launchKernel(s, "double", shim::KernelCost{}, [dev] { *dev *= 2; }));
  EXPECT_EQ(*dev, 0) << "captured work ran at capture time";
  shim::Graph g = nullptr;
  ASSERT_SHIM_OK(shim::streamEndCapture(s, &g));
  std::size_t nodes = 0;
  ASSERT_SHIM_OK(shim::graphNodeCount(g, &nodes));
  EXPECT_EQ(nodes, 3u);
  for (int round = 0; round < 2; ++round) {
    staged = 5 + round;
    ASSERT_SHIM_OK(shim::graphLaunch(g, s));
    ASSERT_SHIM_OK(shim::streamSynchronize(s));
    EXPECT_EQ(*dev, 2 * (5 + round));
  }
  ASSERT_SHIM_OK(shim::graphDestroy(g));
}

TEST(NativeCnrt, AnIncompleteLibraryIsRefusedNamingTheSymbol) {
  const std::string home = kStubs + "/neuware-incomplete";
  setenv("NEUWARE_HOME", home.c_str(), 1);
  shim::InitOptions o;
  o.backend = "native";
  o.preset = "mlu370-x8";
  const shim::Status s = shim::initialize(o);
  EXPECT_EQ(s.code(), shim::Code::InitFailed);
  EXPECT_TRUE(contains(s.message(), home + "/lib64/libcnrt.so lacks the symbol cnrtQueueWaitNotifier")) << s.message();
}

TEST(NativeCnrt, AutoFallsBackToTheEmulatorAndSaysWhy) {
  const std::string home = kStubs + "/neuware-incomplete";
  setenv("NEUWARE_HOME", home.c_str(), 1);
  shim::InitOptions o;
  o.backend = "auto";
  o.preset = "mlu370-x8";
  o.devices = 3;
  ::testing::internal::CaptureStderr();
  const shim::Status s = shim::initialize(o);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(shim::backendName(), "sim");
  EXPECT_TRUE(contains(err, "CARDSIM_BACKEND=auto")) << err;
  EXPECT_TRUE(contains(err, "cnrtQueueWaitNotifier")) << err;
  int n = 0;
  ASSERT_SHIM_OK(shim::getDeviceCount(&n));
  EXPECT_EQ(n, 3);
  shim::DeviceProperties p;
  ASSERT_SHIM_OK(shim::getDeviceProperties(&p, 0));
  EXPECT_EQ(p.backend, "sim");
}

TEST(NativeCnrt, AutoTakesAWorkingRuntime) {
  setenv("NEUWARE_HOME", (kStubs + "/neuware").c_str(), 1);
  shim::InitOptions o;
  o.backend = "auto";
  o.preset = "mlu370-x8";
  ASSERT_SHIM_OK(shim::initialize(o));
  EXPECT_EQ(shim::backendName(), "native");
}

TEST(NativeCnrt, NoRuntimeInstalledSaysWhereItLooked) {
  setenv("NEUWARE_HOME", "/nonexistent/neuware", 1);
  shim::InitOptions o;
  o.backend = "native";
  const shim::Status s = shim::initialize(o);
  EXPECT_EQ(s.code(), shim::Code::InitFailed);
  EXPECT_TRUE(contains(s.message(), "/nonexistent/neuware/lib64/libcnrt.so")) << s.message();
  EXPECT_TRUE(contains(s.message(), "NEUWARE_HOME")) << s.message();
}

TEST(NativeSupa, CudaShapedCallsInTheirOrder) {
  Stub stub = startSupa();
  ASSERT_NE(stub.log, nullptr) << "the backend did not load " << stub.lib;
  shim::DeviceProperties p;
  ASSERT_SHIM_OK(shim::getDeviceProperties(&p, 0));
  EXPECT_EQ(p.vendor, "Biren");
  EXPECT_EQ(p.total_memory_bytes, 16ull << 30);
  EXPECT_TRUE(contains(p.backend, "native (SUPA runtime 2.4, ")) << p.backend;
  int least = 0, greatest = 0;
  ASSERT_SHIM_OK(shim::deviceGetStreamPriorityRange(&least, &greatest));
  EXPECT_EQ(least, 0);
  EXPECT_EQ(greatest, -3);
  shim::Stream a = nullptr, b = nullptr;
  ASSERT_SHIM_OK(shim::streamCreate(&a, -1));
  ASSERT_SHIM_OK(shim::streamCreate(&b, 0));
  std::vector<double> host(64, 3.25), back(64);
  void* dev = nullptr;
  ASSERT_SHIM_OK(shim::malloc(&dev, 512));
  ASSERT_SHIM_OK(shim::memcpyAsync(dev, host.data(), 512, shim::MemcpyKind::HostToDevice, a));
  shim::Event e = nullptr;
  ASSERT_SHIM_OK(shim::eventCreate(&e, shim::kEventDisableTiming));
  ASSERT_SHIM_OK(shim::eventRecord(e, a));
  ASSERT_SHIM_OK(shim::streamWaitEvent(b, e));
  ASSERT_SHIM_OK(shim::memcpyAsync(back.data(), dev, 512, shim::MemcpyKind::DeviceToHost, b));
  ASSERT_SHIM_OK(shim::streamSynchronize(b));
  EXPECT_EQ(back, host);
  const std::string log = stub.calls();
  EXPECT_TRUE(contains(log, "supaStreamCreateWithPriority(0,-1)")) << log;
  EXPECT_TRUE(contains(log, "supaMemcpyAsync(512,kind=1,stream=")) << log;
  EXPECT_TRUE(contains(log, "supaEventCreateWithFlags(2)")) << log;   // supaEventDisableTiming
  EXPECT_TRUE(contains(log, "supaStreamWaitEvent(")) << log;
  ASSERT_NE(stub.script, nullptr);
  stub.script("supaMalloc", 2, 1);
  void* q = nullptr;
  const shim::Status oom = shim::malloc(&q, 64);
  EXPECT_EQ(oom.code(), shim::Code::OutOfMemory);
  EXPECT_TRUE(contains(oom.message(), "supaMalloc failed: supaErrorMemoryAllocation (2): out of memory")) << oom.message();
  stub.script("supaEventQuery", 600, 1);
  EXPECT_EQ(shim::eventQuery(e).code(), shim::Code::NotReady);
}
