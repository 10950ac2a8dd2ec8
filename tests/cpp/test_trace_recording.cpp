// Recording traces at the shim (cardsim/trace.h): what a program does becomes records,
// each device command is tied to the call that submitted it, recording does not change
// simulated times, and CARDSIM_TRACE opens the file only once a card is used.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cardsim/trace.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <vector>

#include "ShimTestUtil.h"
#include "traces/lib/TraceReader.h"

namespace shim = cardsim::shim;
namespace trace = cardsim::trace;
using namespace cardsim::testing;

namespace {

// Unique to this process, and removed with what it holds when the process ends.
std::string tempDir(const std::string& name) {
  static std::vector<std::string> made;
  static const bool cleanup = [] {
    std::atexit([] {
      std::error_code ec;
      for (const std::string& d : made) std::filesystem::remove_all(d, ec);
    });
    return true;
  }();
  (void)cleanup;
  made.push_back(::testing::TempDir() + "/cardsim_trace_rec_" + std::to_string(::getpid()) + "_" + name);
  return made.back();
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

shim::KernelCost cost(double flops) {
  shim::KernelCost c;
  c.kernel_class = shim::KernelClass::Elementwise;
  c.flops = flops;
  c.bytes_read = 1 << 20;
  c.bytes_written = 1 << 20;
  return c;
}

// A small program on device 0: copies, kernels on two streams joined by an event.
// Returns the host clock at its end.
uint64_t smallProgram() {
  const size_t bytes = 1 << 20;
  void *a = nullptr, *b = nullptr;
  EXPECT_TRUE(shim::malloc(&a, bytes).ok());
  EXPECT_TRUE(shim::malloc(&b, bytes).ok());
  std::vector<uint8_t> host(bytes, 1);
  EXPECT_TRUE(shim::memcpy(a, host.data(), bytes, shim::MemcpyKind::HostToDevice).ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(shim::launchKernel(nullptr, "k.default", cost(1e9), nullptr).ok());
  shim::Stream s = nullptr;
  shim::Event ev = nullptr;
  EXPECT_TRUE(shim::streamCreate(&s).ok());
  EXPECT_TRUE(shim::eventCreate(&ev).ok());
  EXPECT_TRUE(shim::eventRecord(ev, nullptr).ok());
  EXPECT_TRUE(shim::streamWaitEvent(s, ev).ok());
  EXPECT_TRUE(shim::launchKernel(s, "k.side", cost(2e9), nullptr).ok());
  EXPECT_TRUE(shim::deviceSynchronize().ok());
  EXPECT_TRUE(shim::free(b).ok());
  uint64_t t = 0;
  EXPECT_TRUE(shim::hostTimePs(&t).ok());
  return t;
}

struct Read {
  trace::Header header;
  std::map<trace::Envelope::RecordCase, int> counts;
  std::map<uint64_t, trace::Envelope> calls;
  std::vector<trace::DeviceCommand> commands;
  std::map<uint32_t, std::string> names;
  trace::End end;
};

Read readTrace(const std::string& path) {
  Read out;
  trace::TraceReader r(path);
  out.header = r.header();
  trace::Envelope e;
  while (r.next(&e)) {
    ++out.counts[e.record_case()];
    if (e.has_command()) out.commands.push_back(e.command());
    else if (e.has_name()) out.names[e.name().id()] = e.name().text();
    else if (e.call() != 0) out.calls[e.call()] = e;
  }
  out.end = r.end();
  return out;
}

// Runs `fn` in a forked child (a fresh runtime) and returns what it wrote to the pipe.
uint64_t inChild(const std::function<uint64_t()>& fn) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const uint64_t v = fn();
    if (::write(fds[1], &v, sizeof v) != sizeof v) ::_exit(3);
    ::_exit(0);
  }
  ::close(fds[1]);
  uint64_t v = 0;
  EXPECT_EQ(::read(fds[0], &v, sizeof v), static_cast<ssize_t>(sizeof v));
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return v;
}

}  // namespace

TEST(TraceRecording, RecordsCallsAndTiesEveryCommandToItsCall) {
  startRuntime("mlu370-x8", 1);
  const std::string dir = tempDir("calls");
  ASSERT_SHIM_OK(shim::traceStart(dir));
  std::string path;
  ASSERT_TRUE(shim::traceActive(&path));
  EXPECT_EQ(path, dir + "/rank0.cstrace");
  const uint64_t host_end = smallProgram();
  ASSERT_SHIM_OK(shim::traceStop());
  EXPECT_FALSE(shim::traceActive());

  const Read t = readTrace(path);
  EXPECT_EQ(t.header.preset(), "mlu370-x8");
  EXPECT_EQ(t.header.device_name(), "MLU370-X8");
  EXPECT_EQ(t.header.started_by(), "api");
  EXPECT_NE(t.header.config_text().find("mlu370-x8"), std::string::npos);
  EXPECT_EQ(t.counts.at(trace::Envelope::kAlloc), 2);
  EXPECT_EQ(t.counts.at(trace::Envelope::kFree), 1);
  EXPECT_EQ(t.counts.at(trace::Envelope::kMemcpy), 1);
  EXPECT_EQ(t.counts.at(trace::Envelope::kKernel), 4);
  EXPECT_EQ(t.counts.at(trace::Envelope::kEvent), 3);    // create, record, wait
  EXPECT_EQ(t.counts.at(trace::Envelope::kStream), 1);   // create
  // 1 copy + 4 kernels + 1 event record + 1 event wait.
  ASSERT_EQ(t.commands.size(), 7u);
  EXPECT_EQ(t.end.device_commands(), 7u);
  EXPECT_EQ(t.end.reason(), "stop");
  uint64_t last_end = 0;
  for (const trace::DeviceCommand& c : t.commands) {
    ASSERT_NE(c.call(), 0u) << "command " << t.names.at(c.name()) << " not tied to a call";
    const trace::Envelope& call = t.calls.at(c.call());
    EXPECT_GT(c.ready_ps(), call.host_begin_ps());
    EXPECT_LE(c.ready_ps(), call.host_end_ps());
    EXPECT_LE(c.ready_ps(), c.start_ps());
    EXPECT_LE(c.start_ps(), c.end_ps());
    if (c.kind() == trace::DeviceCommand::KERNEL) {
      ASSERT_TRUE(call.has_kernel());
      EXPECT_EQ(t.names.at(call.kernel().name()), t.names.at(c.name()));
      EXPECT_EQ(call.kernel().stream(), c.stream());
    }
    last_end = std::max(last_end, c.end_ps());
  }
  // The program synchronized: every command ended before its host clock did.
  EXPECT_LE(last_end, host_end);
  // Host calls in order, on the host clock.
  uint64_t prev = 0;
  for (const auto& [n, call] : t.calls) {
    EXPECT_LE(call.host_begin_ps(), call.host_end_ps());
    EXPECT_GE(call.host_begin_ps(), prev);
    prev = call.host_end_ps();
  }
}

TEST(TraceRecording, ARuntimeMarkersRecordIsTiedToItsOwnCall) {
  // Recording a runtime marker costs the host no time: its call spans no time, at the
  // instant the call before it (on the same stream) returned and submitted its own command.
  startRuntime("mlu370-x8", 1);
  const std::string dir = tempDir("marker");
  ASSERT_SHIM_OK(shim::traceStart(dir));
  shim::Stream s = nullptr;
  shim::Event mine = nullptr, marker = nullptr;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  ASSERT_SHIM_OK(shim::eventCreate(&mine));
  ASSERT_SHIM_OK(shim::eventCreate(&marker, shim::kEventRuntimeMarker | shim::kEventDisableTiming));
  ASSERT_SHIM_OK(shim::launchKernel(s, "k", cost(1e9), nullptr));
  ASSERT_SHIM_OK(shim::eventRecord(mine, s));
  ASSERT_SHIM_OK(shim::eventRecord(marker, s));
  ASSERT_SHIM_OK(shim::eventRecord(marker, nullptr));   // alone on its stream
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  std::string path;
  ASSERT_TRUE(shim::traceActive(&path));
  ASSERT_SHIM_OK(shim::traceStop());

  const Read t = readTrace(path);
  std::vector<uint64_t> record_calls;   // the RECORD calls, in order
  for (const auto& [n, call] : t.calls)
    if (call.has_event() && call.event().op() == trace::EventOp::RECORD) record_calls.push_back(n);
  ASSERT_EQ(record_calls.size(), 3u);
  EXPECT_EQ(t.calls.at(record_calls[1]).host_begin_ps(), t.calls.at(record_calls[1]).host_end_ps());
  std::vector<uint64_t> command_calls;
  for (const trace::DeviceCommand& c : t.commands)
    if (c.kind() == trace::DeviceCommand::EVENT_RECORD) command_calls.push_back(c.call());
  std::sort(command_calls.begin(), command_calls.end());
  EXPECT_EQ(command_calls, record_calls);
}

TEST(TraceRecording, RecordingDoesNotChangeSimulatedTimes) {
  const uint64_t plain = inChild([] {
    startRuntime("mlu370-x8", 1);
    return smallProgram();
  });
  const std::string dir = tempDir("same");   // named here: the child ends without cleaning up
  const uint64_t traced = inChild([&dir] {
    startRuntime("mlu370-x8", 1);
    if (!shim::traceStart(dir).ok())
      return uint64_t{0};
    return smallProgram();
  });
  EXPECT_GT(plain, 0u);
  EXPECT_EQ(plain, traced);
}

TEST(TraceRecording, EnvironmentVariableOpensTheFileOnlyWhenACardIsUsed) {
  const std::string dir = tempDir("env") + "/nested/dir";
  ::setenv("CARDSIM_TRACE", dir.c_str(), 1);
  ::setenv("RANK", "5", 1);
  ::setenv("WORLD_SIZE", "8", 1);
  startRuntime("mlu370-x8", 2);
  int n = 0;
  ASSERT_SHIM_OK(shim::getDeviceCount(&n));
  ASSERT_SHIM_OK(shim::setDevice(1));
  shim::DeviceProperties p;
  ASSERT_SHIM_OK(shim::getDeviceProperties(&p, 0));
  const std::string path = dir + "/rank5.cstrace";
  EXPECT_FALSE(exists(path)) << "a process that only queried devices left a trace";
  EXPECT_FALSE(shim::traceStart(dir).ok());   // CARDSIM_TRACE already records the process
  void* ptr = nullptr;
  ASSERT_SHIM_OK(shim::malloc(&ptr, 4096));
  EXPECT_TRUE(exists(path));
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "k", cost(1e6), nullptr));
  ASSERT_SHIM_OK(shim::traceStop());
  const Read t = readTrace(path);
  EXPECT_EQ(t.header.rank(), 5);
  EXPECT_EQ(t.header.world_size(), 8);
  EXPECT_EQ(t.header.started_by(), "env");
  EXPECT_EQ(t.header.devices(), 2u);
  EXPECT_EQ(t.header.environment().at("CARDSIM_TRACE"), dir);
  ASSERT_EQ(t.commands.size(), 1u);
  EXPECT_EQ(t.commands[0].device(), 1);
  EXPECT_NE(t.commands[0].call(), 0u);
}

TEST(TraceRecording, StartTwiceAndStopWithoutStartFail) {
  startRuntime("mlu370-x8", 1);
  const shim::Status no = shim::traceStop();
  EXPECT_FALSE(no.ok());
  EXPECT_NE(no.message().find("no trace"), std::string::npos) << no.toString();
  const std::string dir = tempDir("twice");
  ASSERT_SHIM_OK(shim::traceStart(dir));
  const shim::Status again = shim::traceStart(dir);
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find(dir + "/rank0.cstrace"), std::string::npos) << again.toString();
  ASSERT_SHIM_OK(shim::traceStop());
  // A file that cannot be a directory.
  const shim::Status bad = shim::traceStart("/proc/self/status/x");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("/proc/self/status"), std::string::npos) << bad.toString();
}

TEST(TraceRecording, NeitherStartsNorStopsInsideACaptureAndTheCaptureSurvivesTheRefusal) {
  startRuntime("mlu370-x8", 1);
  shim::Stream s = nullptr;
  ASSERT_SHIM_OK(shim::streamCreate(&s));
  uint32_t id = 0;
  ASSERT_SHIM_OK(shim::streamGetId(s, &id));
  const std::string named = "stream " + std::to_string(id) + " of device 0 is capturing a graph";
  const std::string dir = tempDir("in_capture");
  ASSERT_SHIM_OK(shim::streamBeginCapture(s));
  const shim::Status refused = shim::traceStart(dir);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find(named), std::string::npos) << refused.toString();
  EXPECT_FALSE(exists(dir + "/rank0.cstrace"));
  ASSERT_SHIM_OK(shim::launchKernel(s, "k.captured", cost(1e6), nullptr));
  shim::Graph g = nullptr;
  ASSERT_SHIM_OK(shim::streamEndCapture(s, &g));   // the capture went on unharmed

  // Started before a capture, the recording is not stopped inside it and goes on.
  ASSERT_SHIM_OK(shim::traceStart(dir));
  ASSERT_SHIM_OK(shim::streamBeginCapture(s));
  const shim::Status kept = shim::traceStop();
  EXPECT_FALSE(kept.ok());
  EXPECT_NE(kept.message().find(named), std::string::npos) << kept.toString();
  EXPECT_NE(kept.message().find("the recording goes on"), std::string::npos) << kept.toString();
  ASSERT_SHIM_OK(shim::launchKernel(s, "k.captured", cost(1e6), nullptr));
  shim::Graph g2 = nullptr;
  ASSERT_SHIM_OK(shim::streamEndCapture(s, &g2));
  ASSERT_SHIM_OK(shim::graphLaunch(g2, nullptr));
  ASSERT_SHIM_OK(shim::traceStop());
  // The capture that began inside the recording is in it whole, with its launch.
  std::map<trace::GraphOp::Op, int> ops;
  for (const auto& [call, e] : readTrace(dir + "/rank0.cstrace").calls)
    if (e.has_graph()) ++ops[e.graph().op()];
  EXPECT_EQ(ops[trace::GraphOp::CAPTURE_BEGIN], 1);
  EXPECT_EQ(ops[trace::GraphOp::CAPTURE_END], 1);
  EXPECT_EQ(ops[trace::GraphOp::LAUNCH], 1);
  ASSERT_SHIM_OK(shim::graphDestroy(g));
  ASSERT_SHIM_OK(shim::graphDestroy(g2));
  ASSERT_SHIM_OK(shim::streamDestroy(s));
}

TEST(TraceRecording, TheProgramsOwnActivityRecordsStillArrive) {
  startRuntime("mlu370-x8", 1);
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  ASSERT_SHIM_OK(shim::traceStart(tempDir("activities")));
  for (int i = 0; i < 5; ++i) ASSERT_SHIM_OK(shim::launchKernel(nullptr, "k", cost(1e6), nullptr));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  std::vector<shim::ActivityRecord> got;
  ASSERT_SHIM_OK(shim::drainActivities(&got));
  EXPECT_EQ(got.size(), 5u);
  ASSERT_SHIM_OK(shim::traceStop());
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "k", cost(1e6), nullptr));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  got.clear();
  ASSERT_SHIM_OK(shim::drainActivities(&got));
  EXPECT_EQ(got.size(), 1u);
}

TEST(TraceRecording, CApiReportsErrorsAsText) {
  startRuntime("mlu370-x8", 1);
  char err[256] = "x";
  EXPECT_NE(cardsim_trace_stop(err, sizeof err), 0);
  EXPECT_NE(std::string(err).find("no trace"), std::string::npos) << err;
  const std::string dir = tempDir("capi");
  EXPECT_EQ(cardsim_trace_start(dir.c_str(), err, sizeof err), 0) << err;
  char path[512] = {};
  EXPECT_EQ(cardsim_trace_active(path, sizeof path), 1);
  EXPECT_EQ(std::string(path), dir + "/rank0.cstrace");
  EXPECT_EQ(cardsim_trace_stop(err, sizeof err), 0) << err;
  EXPECT_EQ(cardsim_trace_active(path, sizeof path), 0);
}

TEST(TraceRecording, CompressionNamedAtStartOverridesTheEnvironmentAndIsChecked) {
  startRuntime("mlu370-x8", 1);
  ::setenv("CARDSIM_TRACE_COMPRESS", "none", 1);
  char err[256] = "";
  const std::string bad = tempDir("badcompress") + "/never";
  EXPECT_EQ(cardsim_trace_start_compressed(bad.c_str(), "gzip:0", err, sizeof err),
            static_cast<int>(shim::Code::InvalidValue));
  EXPECT_NE(std::string(err).find("\"gzip:0\" is not a compression"), std::string::npos) << err;
  struct stat st {};
  EXPECT_NE(::stat(bad.c_str(), &st), 0);   // refused before the directory was made
  EXPECT_FALSE(shim::traceActive());

  const std::string dir = tempDir("compressed");
  EXPECT_EQ(cardsim_trace_start_compressed(dir.c_str(), "gzip:2", err, sizeof err), 0) << err;
  smallProgram();
  ASSERT_SHIM_OK(shim::traceStop());
  ::unsetenv("CARDSIM_TRACE_COMPRESS");
  std::ifstream in(dir + "/rank0.cstrace", std::ios::binary);
  unsigned char magic[2] = {};
  in.read(reinterpret_cast<char*>(magic), 2);
  EXPECT_EQ(magic[0], 0x1f);
  EXPECT_EQ(magic[1], 0x8b);
  const Read t = readTrace(dir + "/rank0.cstrace");   // the reader inflates it
  EXPECT_EQ(t.counts.at(trace::Envelope::kAlloc), 2);
}

namespace {

// Keeps what an observer is handed, in its encoded form.
struct Collecting final : shim::TraceObserver {
  std::string header;
  std::vector<std::string> records;
  void onHeader(const trace::Header& h) override { header = h.SerializeAsString(); }
  void onRecord(const trace::Envelope& e) override { records.push_back(e.SerializeAsString()); }
};

}  // namespace

TEST(TraceRecording, AnObserverIsHandedWhatTheFileHoldsRecordForRecord) {
  startRuntime("mlu370-x8", 1);
  const std::string dir = tempDir("observed");
  Collecting seen;
  ASSERT_SHIM_OK(shim::traceStartObserved(dir, &seen));
  smallProgram();
  ASSERT_SHIM_OK(shim::traceStop());
  trace::TraceReader r(dir + "/rank0.cstrace");
  EXPECT_EQ(seen.header, r.header().SerializeAsString());
  trace::Envelope e;
  std::size_t n = 0;
  while (r.next(&e)) {
    ASSERT_LT(n, seen.records.size()) << "the file holds more records than the observer saw";
    EXPECT_EQ(seen.records[n], e.SerializeAsString()) << "record " << n;
    ++n;
  }
  EXPECT_EQ(n, seen.records.size());
  EXPECT_EQ(n + 1, r.end().records());   // the End record counts the header too
}

TEST(TraceRecording, AnObserverAloneWritesNoFile) {
  startRuntime("mlu370-x8", 1);
  const shim::Status none = shim::traceStartObserved("", nullptr);
  EXPECT_FALSE(none.ok());
  EXPECT_NE(none.message().find("no observer"), std::string::npos) << none.toString();
  Collecting seen;
  ASSERT_SHIM_OK(shim::traceStartObserved("", &seen));
  std::string path = "x";
  EXPECT_TRUE(shim::traceActive(&path));
  EXPECT_EQ(path, "");
  const shim::Status again = shim::traceStart(tempDir("second"));
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find("(to an observer)"), std::string::npos) << again.toString();
  smallProgram();
  ASSERT_SHIM_OK(shim::traceStop());
  EXPECT_FALSE(shim::traceActive());
  EXPECT_FALSE(exists(tempDir("second")));
  // The same program's records: 7 device commands, 2 allocations.
  int commands = 0, allocs = 0;
  for (const std::string& bytes : seen.records) {
    trace::Envelope e;
    ASSERT_TRUE(e.ParseFromString(bytes));
    commands += e.has_command();
    allocs += e.has_alloc();
  }
  EXPECT_EQ(commands, 7);
  EXPECT_EQ(allocs, 2);
  trace::Header h;
  ASSERT_TRUE(h.ParseFromString(seen.header));
  EXPECT_EQ(h.preset(), "mlu370-x8");
  EXPECT_EQ(h.started_by(), "api");
}
