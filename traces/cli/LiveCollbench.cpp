#include "traces/cli/LiveCollbench.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#ifndef CARDSIM_DEFAULT_PYTHON
#define CARDSIM_DEFAULT_PYTHON "python3"
#endif

namespace cardsim::cli {

std::string cardsimPython() {
  if (const char* p = std::getenv("CARDSIM_PYTHON"); p && *p) return p;
  return CARDSIM_DEFAULT_PYTHON;
}

namespace {

// The ranks read overrides from CARDSIM_CONFIG: one file holding the user's file (if any)
// and then the --set lines, which win as they come later.
class OverridesFile {
 public:
  explicit OverridesFile(const std::vector<std::string>& overrides) {
    if (overrides.empty()) return;
    char name[] = "/tmp/cardsim-collbench-XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0) throw std::runtime_error(std::string("cannot create a temporary file: ") + std::strerror(errno));
    close(fd);
    path_ = name;
    std::ofstream out(path_);
    if (const char* user = std::getenv("CARDSIM_CONFIG"); user && *user) {
      std::ifstream in(user);
      if (!in) throw std::runtime_error(std::string("CARDSIM_CONFIG: cannot read '") + user + "'");
      out << in.rdbuf() << "\n";
    }
    for (const auto& o : overrides) out << o << "\n";
  }
  ~OverridesFile() {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string joinSizes(const std::vector<double>& sizes) {
  std::ostringstream s;
  for (size_t i = 0; i < sizes.size(); ++i) s << (i ? "," : "") << static_cast<long long>(sizes[i]);
  return s.str();
}

}  // namespace

std::vector<LiveRow> runLiveCollbench(const LiveJob& job) {
  OverridesFile overrides(job.overrides);
  const std::string python = cardsimPython();
  std::vector<std::string> argv = {python, "-m", "cardsim_torch.collbench", "--preset", job.preset,
                                   "--ranks", std::to_string(job.ranks), "--op", job.op,
                                   "--sizes", joinSizes(job.sizes), "--iters", std::to_string(job.iters),
                                   "--warmup", std::to_string(job.warmup), "--execution", job.execution};
  int out[2];
  if (pipe(out) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    setenv("CARDSIM_NODES", std::to_string(job.nodes).c_str(), 1);
    if (!job.algo.empty()) setenv("CARDSIM_COLL_ALGO", job.algo.c_str(), 1);
    if (!overrides.path().empty()) setenv("CARDSIM_CONFIG", overrides.path().c_str(), 1);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cardsim collbench: cannot run '%s' (set CARDSIM_PYTHON to the Python that has "
                         "torch_mlu and torch_supa): %s\n", python.c_str(), std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("the live run failed (" +
                             (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                                : "signal " + std::to_string(WTERMSIG(status))) +
                             "); see the ranks' messages above");
  std::vector<LiveRow> rows;
  std::istringstream in(text);
  LiveRow r{};
  while (in >> r.bytes >> r.time_us) rows.push_back(r);
  if (rows.size() != job.sizes.size())
    throw std::runtime_error("the live run reported " + std::to_string(rows.size()) + " of " +
                             std::to_string(job.sizes.size()) + " sizes");
  return rows;
}

}  // namespace cardsim::cli
