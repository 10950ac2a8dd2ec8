// The status board (driver_shim/src/StatusBoard.h): the JSON file a process using the sim
// backend keeps for the management tools. Through the public API only.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>

#include "ShimTestUtil.h"

namespace shim = cardsim::shim;
using cardsim::testing::startRuntime;

namespace {

// A directory of its own for these tests (the board creates it; files go at exit).
std::string testDirectory() { return "/tmp/cardsim-status-test-" + std::to_string(getuid()); }

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Polls `path` for up to `seconds` until `pred(contents)` holds; returns the last contents.
std::string waitFor(const std::string& path, const std::function<bool(const std::string&)>& pred,
                    double seconds = 5) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::string s;
  do {
    s = readFile(path);
    if (pred(s)) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (std::chrono::steady_clock::now() < until);
  return s;
}

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// The "utilization" figure of device `d` in a status file, or -1.
double utilizationOf(const std::string& s, int d) {
  const size_t at = s.find("{\"index\": " + std::to_string(d) + ",");
  if (at == std::string::npos) return -1;
  const size_t u = s.find("\"utilization\": ", at);
  return u == std::string::npos ? -1 : std::atof(s.c_str() + u + 15);
}

}  // namespace

TEST(StatusBoard, ShowsWhatTheProcessHoldsPerDeviceAndGoesAtExit) {
  const std::string dir = testDirectory();
  int ready[2], go[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(go), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("CARDSIM_STATUS_DIR", dir.c_str(), 1);
    startRuntime("mlu370-x8", 2);
    void* p = nullptr;
    const bool ok = shim::setDevice(1).ok() && shim::malloc(&p, 1 << 20).ok();
    char c = ok ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    (void)!read(go[0], &c, 1);
    std::exit(0);   // a normal exit: the file must go
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_EQ(c, 'y');
  const std::string path = dir + "/" + std::to_string(pid) + ".json";
  const std::string s = waitFor(path, [](const std::string& t) {
    return has(t, "{\"index\": 1, \"used_bytes\": 1048576,");
  });
  EXPECT_TRUE(has(s, "{\"index\": 1, \"used_bytes\": 1048576, \"total_bytes\": 24509415424,")) << s;
  EXPECT_TRUE(has(s, "{\"index\": 0, \"used_bytes\": 0, \"total_bytes\": 24509415424,")) << s;
  EXPECT_TRUE(has(s, "\"pid\": " + std::to_string(pid) + ",")) << s;
  EXPECT_TRUE(has(s, "\"preset\": \"mlu370-x8\", \"card\": \"MLU370-X8\", \"vendor\": \"Cambricon\""))
      << s;
  EXPECT_FALSE(has(s, "{\"index\": 2,")) << "two devices only: " << s;
  (void)!write(go[1], &c, 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(access(path.c_str(), F_OK), 0) << path << " is still there after the process exited";
}

TEST(StatusBoard, FollowsFreesAndShowsTheModelsUtilization) {
  const std::string dir = testDirectory();
  setenv("CARDSIM_STATUS_DIR", dir.c_str(), 1);
  startRuntime("mlu370-x8", 1);
  const std::string path = dir + "/" + std::to_string(getpid()) + ".json";
  void* p = nullptr;
  ASSERT_SHIM_OK(shim::malloc(&p, 4096));
  std::string s = waitFor(path, [](const std::string& t) { return has(t, "\"used_bytes\": 4096,"); });
  ASSERT_TRUE(has(s, "\"used_bytes\": 4096,")) << s;

  // One kernel that holds every cluster for about 0.1 simulated seconds, then idle time on
  // the host: the window since the first sample is mostly busy.
  shim::KernelCost cost;
  cost.kernel_class = shim::KernelClass::Gemm;
  cost.flops = 1e12;
  cost.tiles = 128;   // 16 full waves over the 8 clusters
  ASSERT_SHIM_OK(shim::launchKernel(nullptr, "busy", cost, nullptr));
  ASSERT_SHIM_OK(shim::deviceSynchronize());
  s = waitFor(path, [](const std::string& t) { return utilizationOf(t, 0) > 0.5; });
  const double u = utilizationOf(s, 0);
  EXPECT_GT(u, 0.5) << s;
  EXPECT_LE(u, 1.0) << s;

  ASSERT_SHIM_OK(shim::free(p));
  s = waitFor(path, [](const std::string& t) { return has(t, "\"used_bytes\": 0,"); }, 1);
  EXPECT_TRUE(has(s, "\"used_bytes\": 0,")) << "a free shows within the write period: " << s;
}

TEST(StatusBoard, AnUnwritableDirectoryLeavesTheRuntimeWorking) {
  setenv("CARDSIM_STATUS_DIR", "/proc/cardsim-cannot-be-here", 1);
  startRuntime("br100", 1);
  void* p = nullptr;
  ASSERT_SHIM_OK(shim::malloc(&p, 1 << 20));
  ASSERT_SHIM_OK(shim::free(p));
}
