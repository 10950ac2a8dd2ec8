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
#include <thread>
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
  const size_t wait = log.find("cnrtQueueWaitNotifier(");
  ASSERT_NE(wait, std::string::npos) << log;
  EXPECT_EQ(log.substr(log.find('\n', wait) - 3, 3), ",0)") << log;   // the wait flag, last
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

// ---- Collectives: CNCL and BCCL on the stubs, one thread per rank -------------------------

namespace {

// Runs `body(rank)` on `n` threads at once, each on its own device; the first failure wins.
template <typename Body>
std::string onRanks(int n, Body body) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      if (shim::Status s = shim::setDevice(r); !s.ok()) {
        errors[r] = s.toString();
        return;
      }
      errors[r] = body(r);
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (!e.empty()) return e;
  return "";
}

template <typename T>
std::string runOn(shim::Comm comm, shim::Stream s, shim::CommCall call, const std::vector<T>& in, std::vector<T>* out) {
  void* send = nullptr;
  void* recv = nullptr;
  const std::size_t in_bytes = in.size() * sizeof(T), out_bytes = out->size() * sizeof(T);
  if (shim::Status st = shim::malloc(&send, in_bytes); !st.ok()) return st.toString();
  if (shim::Status st = shim::malloc(&recv, out_bytes); !st.ok()) return st.toString();
  if (shim::Status st = shim::memcpy(send, in.data(), in_bytes, shim::MemcpyKind::HostToDevice); !st.ok()) return st.toString();
  call.send = send;
  call.recv = recv;
  if (shim::Status st = shim::commLaunch(call, comm, s); !st.ok()) return st.toString();
  if (shim::Status st = shim::streamSynchronize(s); !st.ok()) return st.toString();
  if (shim::Status st = shim::memcpy(out->data(), recv, out_bytes, shim::MemcpyKind::DeviceToHost); !st.ok()) return st.toString();
  (void)shim::free(send);
  (void)shim::free(recv);
  return "";
}

void collectivesMatchTheCpu(const std::string& lib_name) {
  constexpr int kRanks = 3;
  std::string id;
  ASSERT_SHIM_OK(shim::commGetUniqueId(&id));
  const std::string err = onRanks(kRanks, [&](int r) -> std::string {
    shim::Comm comm = nullptr;
    shim::Stream s = nullptr;
    if (shim::Status st = shim::commInitRank(&comm, kRanks, id, r); !st.ok()) return st.toString();
    if (shim::Status st = shim::streamCreate(&s, 0); !st.ok()) return st.toString();
    // all_reduce (sum, float32): 1+2+3 times the index
    std::vector<float> in(5), out(5);
    for (int i = 0; i < 5; ++i) in[i] = float((r + 1) * i);
    shim::CommCall c;
    c.op = shim::CommOp::AllReduce;
    c.count = 5;
    if (auto e = runOn(comm, s, c, in, &out); !e.empty()) return e;
    for (int i = 0; i < 5; ++i)
      if (out[i] != float(6 * i)) return "all_reduce[" + std::to_string(i) + "] = " + std::to_string(out[i]);
    // all_gather (int64): each rank's two values, in rank order
    std::vector<int64_t> gin = {10 * r, 10 * r + 1}, gout(2 * kRanks);
    c = shim::CommCall{};
    c.op = shim::CommOp::AllGather;
    c.count = 2;
    c.dtype = shim::CommDataType::Int64;
    if (auto e = runOn(comm, s, c, gin, &gout); !e.empty()) return e;
    for (int k = 0; k < 2 * kRanks; ++k)
      if (gout[k] != 10 * (k / 2) + k % 2) return "all_gather[" + std::to_string(k) + "] = " + std::to_string(gout[k]);
    // reduce_scatter (max, float32): rank k of the result is the max over ranks of part k
    std::vector<float> rin(2 * kRanks), rout(2);
    for (int k = 0; k < 2 * kRanks; ++k) rin[k] = float(r == k / 2 ? 100 + k : k);
    c = shim::CommCall{};
    c.op = shim::CommOp::ReduceScatter;
    c.count = 2;
    c.reduce = shim::CommReduceOp::Max;
    if (auto e = runOn(comm, s, c, rin, &rout); !e.empty()) return e;
    if (rout[0] != float(100 + 2 * r) || rout[1] != float(101 + 2 * r)) return "reduce_scatter wrong on rank " + std::to_string(r);
    // broadcast from rank 1 (int32)
    std::vector<int32_t> bin = {r * 7, r * 7 + 1}, bout(2);
    c = shim::CommCall{};
    c.op = shim::CommOp::Broadcast;
    c.count = 2;
    c.dtype = shim::CommDataType::Int32;
    c.root = 1;
    if (auto e = runOn(comm, s, c, bin, &bout); !e.empty()) return e;
    if (bout[0] != 7 || bout[1] != 8) return "broadcast wrong on rank " + std::to_string(r);
    // a peer out of range is refused before the library is called
    c.root = kRanks;
    const shim::Status bad = shim::commLaunch(c, comm, s);
    if (bad.code() != shim::Code::InvalidValue) return "root out of range accepted: " + bad.toString();
    return shim::commDestroy(comm).ok() ? "" : "commDestroy failed";
  });
  EXPECT_EQ(err, "");
  Stub lib(lib_name);
  ASSERT_NE(lib.log, nullptr) << lib_name;
  EXPECT_TRUE(contains(lib.calls(), "AllReduce(5,dt=")) << lib.calls();
}

}  // namespace

TEST(NativeCnrt, CnclCollectivesMatchTheCpu) {
  setenv("CARDSIM_STUB_DEVICES", "3", 1);
  Stub rt = startCnrt();
  collectivesMatchTheCpu(kStubs + "/neuware/lib64/libcncl.so");
  Stub cncl(kStubs + "/neuware/lib64/libcncl.so");
  const std::string log = cncl.calls();
  EXPECT_TRUE(contains(log, "cnclInitComms(1,dev=2,rank=2,3)")) << log;   // one comm per call, on its device
  EXPECT_TRUE(contains(log, "cnclAllReduce(5,dt=18,op=0)")) << log;        // cnclFloat32, cnclSum
  EXPECT_TRUE(contains(log, "cnclAllGather(2,dt=35)")) << log;             // cnclInt64, per-rank count
  EXPECT_TRUE(contains(log, "cnclReduceScatter(2,dt=18,op=2)")) << log;    // cnclMax
  EXPECT_TRUE(contains(log, "cnclBroadcast(2,dt=34,root=1)")) << log;      // cnclInt32
}

TEST(NativeCnrt, CnclErrorsAndLimits) {
  Stub rt = startCnrt();
  std::string id;
  ASSERT_SHIM_OK(shim::commGetUniqueId(&id));
  EXPECT_EQ(id.size(), 136u);   // cnclCliqueId: 128 bytes and a hash
  shim::Comm comm = nullptr;
  ASSERT_SHIM_OK(shim::commInitRank(&comm, 1, id, 0));
  shim::CommCall c;
  c.count = 4;
  c.dtype = shim::CommDataType::Float64;
  std::vector<double> buf(4);
  const shim::Status f64 = shim::commLaunch(c, comm, nullptr);
  EXPECT_EQ(f64.code(), shim::Code::NotSupported);
  EXPECT_TRUE(contains(f64.message(), "float64")) << f64.message();
  Stub cncl(kStubs + "/neuware/lib64/libcncl.so");
  ASSERT_NE(cncl.script, nullptr);
  cncl.script("cnclAllReduce", 0x02, 1);
  c.dtype = shim::CommDataType::Float32;
  const shim::Status failed = shim::commLaunch(c, comm, nullptr);
  EXPECT_EQ(failed.code(), shim::Code::CommFailed);
  EXPECT_TRUE(contains(failed.message(), "cnclAllReduce failed: cnclResult_t (2): ranks disagree")) << failed.message();
  EXPECT_EQ(shim::commInitRank(&comm, 2, "short", 0).code(), shim::Code::InvalidValue);
}

TEST(NativeCnrt, AMissingCollectiveLibraryIsNamed) {
  // A runtime without its collective library: everything but the collectives works.
  const std::string home = ::testing::TempDir() + "/neuware-no-cncl";
  ASSERT_EQ(system(("mkdir -p " + home + "/lib64 && ln -sf " + kStubs + "/neuware/lib64/libcnrt.so " + home +
                    "/lib64/libcnrt.so").c_str()), 0);
  Stub rt = startCnrt(home);
  void* p = nullptr;
  ASSERT_SHIM_OK(shim::malloc(&p, 64));
  std::string id;
  const shim::Status s = shim::commGetUniqueId(&id);
  EXPECT_EQ(s.code(), shim::Code::InitFailed);
  EXPECT_TRUE(contains(s.message(), home + "/lib64/libcncl.so")) << s.message();
}

TEST(NativeSupa, BcclCollectivesMatchTheCpu) {
  setenv("CARDSIM_STUB_DEVICES", "3", 1);
  Stub rt = startSupa();
  collectivesMatchTheCpu(kStubs + "/biren/bccl/libbccl.so");
  Stub bccl(kStubs + "/biren/bccl/libbccl.so");
  const std::string log = bccl.calls();
  EXPECT_TRUE(contains(log, "bcclCommInitRank(3,stub-bccl-1,")) << log;   // the id passed by value
  EXPECT_TRUE(contains(log, "bcclAllReduce(5,dt=7,op=0)")) << log;       // ncclFloat32-shaped
  EXPECT_TRUE(contains(log, "bcclAllGather(2,dt=4)")) << log;            // int64
}

TEST(NativeSim, TheEmulatorHasNoVendorCollectives) {
  cardsim::testing::startRuntime("mlu370-x8", 1);
  std::string id;
  const shim::Status s = shim::commGetUniqueId(&id);
  EXPECT_EQ(s.code(), shim::Code::NotSupported);
  EXPECT_TRUE(contains(s.message(), "torch layer")) << s.message();
}
