// ProcessExit: the cleanups run once, newest first, at exit, on a termination signal (then
// the signal still ends the process), or when asked; never in a forked child; a stuck
// cleanup or a second signal cannot keep the process alive.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "../../driver_shim/src/ProcessExit.h"
#include "cardsim/process.h"

namespace pe = cardsim::shim::process_exit;

namespace {

std::string scratch(const std::string& name) {
  return testing::TempDir() + "process_exit_" + std::to_string(::getpid()) + "_" + name;
}

void append(const std::string& path, const std::string& line) {
  std::ofstream(path, std::ios::app) << line << "\n";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `body` in a forked child (which installs its own handlers: nothing was registered in
// this test process before) and returns its wait status.
template <class F>
int inChild(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST(ProcessExit, ASignalRunsTheCleanupsNewestFirstThenStillEndsTheProcess) {
  for (int sig : {SIGTERM, SIGHUP, SIGINT}) {
    const std::string log = scratch("log"), doomed = scratch("doomed");
    std::remove(log.c_str());
    std::ofstream(doomed) << "x";
    const int status = inChild([&] {
      signal(sig, SIG_DFL);   // whatever the test runner left
      pe::unlinkOnSignal(doomed);
      pe::onExit([&](const std::string& why) { append(log, "first " + why); });
      pe::onExit([&](const std::string& why) { append(log, "second " + why); });
      ::kill(::getpid(), sig);
      for (;;) ::pause();
    });
    ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig << ": status " << status;
    EXPECT_EQ(WTERMSIG(status), sig);
    const std::string name = sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "SIGINT";
    EXPECT_EQ(slurp(log), "second signal " + name + "\nfirst signal " + name + "\n");
    EXPECT_FALSE(std::ifstream(doomed).good()) << doomed << " outlived the signal";
    std::remove(log.c_str());
  }
}

TEST(ProcessExit, AtExitAndWhenAskedEachCleanupRunsOnce) {
  const std::string log = scratch("log");
  std::remove(log.c_str());
  const int status = inChild([&] {
    pe::onExit([&](const std::string& why) { append(log, "a " + why); });
    cardsim::shim::runExitCleanups("asked");
    pe::onExit([&](const std::string& why) { append(log, "b " + why); });
    cardsim::shim::runExitCleanups("again");   // only b is left
    pe::onExit([&](const std::string& why) { append(log, "c " + why); });
    std::exit(0);                              // only c is left
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(slurp(log), "a asked\nb again\nc exit\n");
  std::remove(log.c_str());
}

TEST(ProcessExit, AForkedChildRunsNoneOfItsParentsCleanupsAndDiesAtOnce) {
#if defined(__SANITIZE_THREAD__)
  // Forks of a forked child of a threaded process, signalling themselves: under
  // ThreadSanitizer's signal emulation this hangs now and then inside the runtime.
  GTEST_SKIP() << "hangs intermittently under ThreadSanitizer (grandchild fork + self-signal)";
#endif
  const std::string log = scratch("log"), kept = scratch("kept");
  std::remove(log.c_str());
  const int status = inChild([&] {
    std::ofstream(kept) << "x";
    pe::unlinkOnSignal(kept);
    pe::onExit([&](const std::string& why) { append(log, "parent " + why); });
    const int grandchild = inChild([&] {
      ::kill(::getpid(), SIGTERM);
      for (;;) ::pause();
    });
    const int exited = inChild([&] { std::exit(0); });
    append(log, "grandchildren " + std::to_string(WIFSIGNALED(grandchild) && WTERMSIG(grandchild) == SIGTERM) +
                    std::to_string(WIFEXITED(exited)));
    ::_exit(0);
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(slurp(log), "grandchildren 11\n");   // the parent itself left by _exit: no cleanup
  EXPECT_TRUE(std::ifstream(kept).good()) << "a child's signal removed its parent's file";
  std::remove(log.c_str());
  std::remove(kept.c_str());
}

TEST(ProcessExit, AStuckCleanupDelaysTheSignalOnlyBoundedly) {
  const auto start = std::chrono::steady_clock::now();
  const int status = inChild([] {
    pe::onExit([](const std::string&) {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    });
    ::kill(::getpid(), SIGTERM);
    for (;;) ::pause();
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_GE(seconds, pe::kSignalCleanupSeconds - 0.5);
  EXPECT_LT(seconds, pe::kSignalCleanupSeconds + 30);
}

TEST(ProcessExit, ASecondSignalEndsTheProcessAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  const int status = inChild([] {
    pe::onExit([](const std::string&) {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    });
    ::kill(::getpid(), SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::kill(::getpid(), SIGINT);
    for (;;) ::pause();
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGINT);
  EXPECT_LT(seconds, pe::kSignalCleanupSeconds - 1.0);
}

// The program's handler: only async-signal-safe calls (ThreadSanitizer checks).
char g_marker[512];
void ownHandler(int) {
  const int fd = ::open(g_marker, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    (void)!::write(fd, "own handler\n", 12);
    ::close(fd);
  }
  ::_exit(7);
}

TEST(ProcessExit, AProgramsOwnHandlerIsLeftAlone) {
  const std::string log = scratch("log");
  std::remove(log.c_str());
  ASSERT_LT(log.size(), sizeof g_marker);
  std::memcpy(g_marker, log.c_str(), log.size() + 1);
  const int status = inChild([&] {
    signal(SIGTERM, ownHandler);
    pe::onExit([&](const std::string& why) { append(log, "cleanup " + why); });
    ::kill(::getpid(), SIGTERM);
    for (;;) ::pause();
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
  EXPECT_EQ(slurp(log), "own handler\n");
  std::remove(log.c_str());
}
