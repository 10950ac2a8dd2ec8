#include "traces/cli/TraceFiles.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <csignal>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <regex>

#include "traces/lib/TraceError.h"
#include "traces/lib/TraceFormat.h"
#include "traces/lib/TraceReader.h"
#include "traces/replay/RankAnalysis.h"

namespace cardsim::cli {

namespace {

bool isDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Reads the file to its End record (TraceReader checks lengths, counts and the CRC).
trace::Header checkedHeader(const std::string& file, std::string* fabric_job = nullptr, std::string* ended = nullptr) {
  trace::TraceReader reader(file);
  reader.verify();
  if (fabric_job) *fabric_job = reader.end().fabric_job();
  if (ended) *ended = reader.end().reason();
  return reader.header();
}

// A cardsim recording by its first bytes: the format's magic, or a gzip stream under a rank
// file's name (a compressed recording; an unrelated .gz is nobody's recording to protect).
bool looksLikeTrace(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char head[trace::kMagicSize] = {};
  const std::size_t got = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  if (got == trace::kMagicSize && std::memcmp(head, trace::kMagic, trace::kMagicSize) == 0) return true;
  const std::size_t slash = path.rfind('/');
  return got >= 2 && static_cast<unsigned char>(head[0]) == 0x1f && static_cast<unsigned char>(head[1]) == 0x8b &&
         isRankFileName(slash == std::string::npos ? path : path.substr(slash + 1), nullptr);
}

}  // namespace

namespace {
// What an interrupting signal's handler reaches without allocating: the directory to remove
// and the helpers to kill (beyond kMaxChildren, helpers still die with this process:
// helperProcessStarted).
constexpr int kMaxChildren = 256;
char g_cleanup_dir[4096];
volatile std::sig_atomic_t g_have_cleanup_dir = 0;
volatile pid_t g_children[kMaxChildren];
volatile int g_child_signals[kMaxChildren];
volatile std::sig_atomic_t g_child_count = 0;

void onInterrupt(int sig) {
  // Each helper stopped by its own signal (a replay under a sweep cleans up after itself on
  // SIGTERM), and waited for, before the directory goes.
  for (int i = 0; i < g_child_count; ++i) ::kill(g_children[i], g_child_signals[i]);
  for (int i = 0; i < g_child_count; ++i) {
    int st = 0;
    while (::waitpid(g_children[i], &st, 0) < 0 && errno == EINTR) {
    }
  }
  if (g_have_cleanup_dir) {
    // rm -rf in a child of its own: async-signal-safe (fork, exec, waitpid), unlike walking the tree here.
    const pid_t rm = ::fork();
    if (rm == 0) {
      ::execl("/bin/rm", "rm", "-rf", "--", g_cleanup_dir, static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int st = 0;
    if (rm > 0)
      while (::waitpid(rm, &st, 0) < 0 && errno == EINTR) {
      }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}
}  // namespace

void cleanUpOnSignals(const std::string& dir) {
  if (dir.size() >= sizeof g_cleanup_dir) return;
  std::memcpy(g_cleanup_dir, dir.c_str(), dir.size() + 1);
  g_have_cleanup_dir = 1;
  struct sigaction sa {};
  sa.sa_handler = onInterrupt;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

void childStarted(int pid, int stop_signal) {
  if (g_child_count < kMaxChildren) {
    g_children[g_child_count] = pid;
    g_child_signals[g_child_count] = stop_signal;
    g_child_count = g_child_count + 1;
  }
}

void childEnded(int pid) {
  // Blocks the handlers meanwhile: they walk the list.
  sigset_t all, old;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, &old);
  for (int i = 0; i < g_child_count; ++i)
    if (g_children[i] == pid) {
      g_children[i] = g_children[g_child_count - 1];
      g_child_signals[i] = g_child_signals[g_child_count - 1];
      g_child_count = g_child_count - 1;
      break;
    }
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
}

void helperProcessStarted(int signal) {
  g_have_cleanup_dir = 0;
  g_child_count = 0;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
  const pid_t parent = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, signal);
  if (::getppid() != parent) ::raise(signal);   // the parent died before the line above
}

bool removeTree(const std::string& dir) {
  // Depth first, without following symbolic links (FTW_PHYS): a link is removed, not its target.
  return ::nftw(dir.c_str(),
                [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p) == 0 ? 0 : -1; },
                16, FTW_DEPTH | FTW_PHYS) == 0;
}

bool isRankFileName(const std::string& name, int* rank) {
  static const std::regex pattern(std::string("rank([0-9]+)") + "\\" + trace::kFileExtension);
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return false;
  // A rank past int's range is no rank of a job (ranks are ints everywhere else).
  const std::string digits = m[1].str();
  if (digits.size() > 9 && (digits.size() > 10 || digits > "2147483647"))
    throw trace::TraceError(name + ": rank " + digits + " in the file name is out of range (ranks are 0.." +
                            std::to_string(std::numeric_limits<int>::max()) + ")");
  if (rank) *rank = std::stoi(digits);
  return true;
}

std::map<int, std::string> traceRankFiles(const std::string& path, std::map<int, std::string>* ended) {
  std::map<int, std::string> out;
  if (!isDirectory(path)) {
    std::string reason;
    const int rank = checkedHeader(path, nullptr, &reason).rank();
    out[rank] = path;
    if (ended) (*ended)[rank] = reason;
    return out;
  }
  DIR* d = ::opendir(path.c_str());
  if (!d) throw trace::TraceError(path + ": cannot open the directory");
  while (dirent* ent = ::readdir(d)) {
    int rank = 0;
    if (!isRankFileName(ent->d_name, &rank)) continue;
    // rank1 and rank01 are one rank: which of them a reader took would depend on readdir.
    if (auto [it, fresh] = out.emplace(rank, path + "/" + ent->d_name); !fresh) {
      const std::string other = it->second;
      ::closedir(d);
      throw trace::TraceError(path + ": two files for rank " + std::to_string(rank) + ": " +
                              other.substr(path.size() + 1) + " and " + ent->d_name +
                              " (a directory holds one file per rank, rank<N>" + trace::kFileExtension + ")");
    }
  }
  ::closedir(d);
  if (out.empty()) throw trace::TraceError(path + ": no rank files (rank<N>" + trace::kFileExtension + ") in the directory");
  int world = -1;
  std::string first;
  trace::Header h0;
  // Each file read to its end, the files at once (the first failure in rank order is reported).
  std::vector<std::pair<int, std::string>> order(out.begin(), out.end());
  std::vector<trace::Header> headers(order.size());
  std::vector<std::string> jobs(order.size()), reasons(order.size());
  replay::inParallel(order.size(),
                     [&](std::size_t i) { headers[i] = checkedHeader(order[i].second, &jobs[i], &reasons[i]); });
  if (ended)
    for (std::size_t i = 0; i < order.size(); ++i) (*ended)[order[i].first] = reasons[i];
  std::size_t with_job = order.size();   // the first file whose collectives ran in a fabric job
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& [n, file] = order[i];
    const trace::Header& h = headers[i];
    if (h.rank() != n)
      throw trace::TraceError(file + ": the header says rank " + std::to_string(h.rank()) + ", the file name rank " +
                              std::to_string(n));
    if (world < 0) {
      world = h.world_size();
      first = file;
      h0 = h;
    } else if (h.world_size() != world) {
      throw trace::TraceError(file + ": world size " + std::to_string(h.world_size()) + ", but " + first + " says " +
                              std::to_string(world));
    } else if (h.preset() != h0.preset() || h.config_text() != h0.config_text() ||
               h.execution_mode() != h0.execution_mode()) {
      // The ranks of one job run one configuration: files of two recordings were mixed.
      throw trace::TraceError(file + ": not of the same job as " + first + " (recorded on " +
                              (h.preset() != h0.preset() ? "preset '" + h.preset() + "', not '" + h0.preset() + "'"
                               : h.execution_mode() != h0.execution_mode()
                                   ? "execution mode '" + h.execution_mode() + "', not '" + h0.execution_mode() + "'"
                                   : std::string("another configuration (preset overrides differ)")) +
                              "); a directory holds the rank files of one recording");
    }
    // Same configuration, yet another job: each process of a job joins its one fabric server.
    if (jobs[i].empty()) continue;
    if (with_job == order.size()) {
      with_job = i;
    } else if (jobs[i] != jobs[with_job]) {
      throw trace::TraceError(file + ": not of the same job as " + order[with_job].second +
                              " (its collectives ran in fabric job " + jobs[i] + ", those of " +
                              order[with_job].second + " in job " + jobs[with_job] +
                              "); a directory holds the rank files of one recording");
    }
  }
  // A replay's trace of rank 0 standing for its world (replay --ranks N --keep) is whole alone.
  if (out.size() == 1 && headers.front().replicated()) return out;
  for (int n = 0; n < world; ++n)
    if (!out.count(n)) {
      std::string present;
      for (const auto& [r, f] : out) present += (present.empty() ? "" : ", ") + std::to_string(r);
      throw trace::TraceError(path + "/rank" + std::to_string(n) + trace::kFileExtension + ": missing (world size " +
                              std::to_string(world) + " in " + first + "; rank files present: " + present + ")");
    }
  if (static_cast<int>(out.size()) > world)
    throw trace::TraceError(out.rbegin()->second + ": rank " + std::to_string(out.rbegin()->first) +
                            " is outside world size " + std::to_string(world));
  return out;
}

std::string unwritableReason(const std::string& path) {
  if (path.empty()) return "the path is empty";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return "it is a directory";
    if (::access(path.c_str(), W_OK) != 0) return std::strerror(errno);
    // A recording is what the user came with: an output never replaces one.
    if (S_ISREG(st.st_mode) && looksLikeTrace(path)) return "it is a cardsim recording (an output never replaces one)";
    return "";
  }
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  if (::stat(dir.c_str(), &st) != 0) return "no directory " + dir;
  if (!S_ISDIR(st.st_mode)) return dir + " is not a directory";
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return "cannot write into " + dir + " (" + std::strerror(errno) + ")";
  return "";
}

std::string makeDirectories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ec.message();
  if (!std::filesystem::is_directory(dir, ec)) return "it is not a directory";
  return "";
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += b;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace cardsim::cli
