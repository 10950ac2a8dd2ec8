// cardsim replay PATH: re-times a recorded run on a preset (the recording's own, or another
// with --preset / --set) without running the program again. Each rank's calls are replayed
// in a process of its own, as the ranks ran, joined by a fabric server; with --ranks N a
// data-parallel rank stands for N. Prints the makespan (total_us), where the time went and
// the top kernels; --json FILE writes the same as JSON, --keep DIR the replayed traces.
// PATH may also be Chakra execution traces (PREFIX of PREFIX.<rank>.et, or one .et file):
// converted first (traces/replay/ChakraImport), then replayed the same way.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "cardsim/shim.h"
#include "cardsim/trace.h"
#include "simulator/FabricConfig.h"
#include "simulator/FabricModel.h"
#include "simulator/FabricServer.h"
#include "traces/cli/Args.h"
#include "traces/cli/Commands.h"
#include "traces/cli/LinkLoads.h"
#include "traces/cli/ReplayOutput.h"
#include "traces/cli/TraceFiles.h"
#include "traces/cli/WhatIf.h"
#include "traces/export/OutputFile.h"
#include "traces/lib/TraceError.h"
#include "traces/lib/TraceFormat.h"
#include "traces/lib/TraceReader.h"
#include "traces/replay/ChakraImport.h"
#include "traces/replay/RankAnalysis.h"
#include "traces/replay/RankReplayer.h"
#include "traces/replay/ReplayReport.h"

namespace cardsim::cli {

namespace {

// A configuration error about the recording's resolved preset (a file the replay wrote)
// names the recording instead ("preset /tmp/.../recorded.textproto" -> `label`).
void relabel(std::string& msg, const std::string& written, const std::string& label) {
  if (written.empty()) return;
  for (const std::string& what : {"preset " + written, written})
    for (std::size_t at; (at = msg.find(what)) != std::string::npos;) msg.replace(at, what.size(), label);
}

const std::vector<FlagSpec> kFlags = {
    {"preset", true, false, "replay on this preset instead of the recording's resolved configuration"},
    {"set", true, true, "key.path=value override, applied after the preset (the what-if)"},
    {"ranks", true, false, "replicate the recorded data-parallel rank 0 to N ranks"},
    {"json", true, false, "also write the report as JSON to FILE (-: to stdout, the table then to stderr)"},
    {"keep", true, false, "keep the replayed traces in DIR (for cardsim info / export)"},
    {"help", false, false, "this help"},
};

std::string makeTempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/cardsim-replay-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error(std::string("cannot create a temporary directory: ") + std::strerror(errno));
  return tmpl;
}


struct Job {
  std::string preset;                    // name or path every rank process starts from
  std::vector<std::string> overrides;
  std::string out_dir;                   // --keep: the replayed traces; else empty (none written)
  std::string work_dir;                  // the replay's temporary directory
  int scale = 0;                         // --ranks N when it replicates
  std::map<std::string, std::string> env;   // CARDSIM_* the rank processes run with
};

// Hands the replay's records to the rank's analysis as the recorder makes them.
class Summing final : public shim::TraceObserver {
 public:
  explicit Summing(replay::RankAnalyzer& analyzer) : analyzer_(analyzer) {}
  void onHeader(const trace::Header& h) override { analyzer_.header(h); }
  void onRecord(const trace::Envelope& e) override { analyzer_.record(e); }

 private:
  replay::RankAnalyzer& analyzer_;
};

// Writes all of `size` bytes at `data` to `fd` (a pipe the parent drains).
bool writeAll(int fd, const char* data, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// The file a rank process leaves its summary in (in the replay's temporary directory):
// written whole before the rank says how long it is, so the parent reads it in one go.
std::string passFile(const std::string& dir, int rank) { return dir + "/rank" + std::to_string(rank) + ".pass"; }

// A file's bytes, mapped read-only (a rank's summary: read once, in place).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      const std::string why = std::strerror(errno);
      if (fd >= 0) ::close(fd);
      throw std::runtime_error("cannot read " + path + ": " + why);
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (p == MAP_FAILED) {
        const std::string why = std::strerror(errno);
        ::close(fd);
        throw std::runtime_error("cannot map " + path + ": " + why);
      }
      data_ = static_cast<const char*>(p);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::size_t size() const { return size_; }
  std::string_view bytes() const { return {data_ ? data_ : "", size_}; }

 private:
  const char* data_ = nullptr;
  std::size_t size_ = 0;
};

// One rank process as the parent sees it: on its pipe, once its summary is in its file,
// the summary's length, ending before the process does, so the parent need not wait for
// it to exit. A pipe that ends short of the length: the rank failed.
struct RankChild {
  int rank = 0;
  pid_t pid = -1;
  int fd = -1;              // the pipe; -1 once it ended
  std::string said;         // what came on the pipe
  bool complete() const { return said.size() == sizeof(uint64_t); }
  uint64_t length() const {
    uint64_t n = 0;
    std::memcpy(&n, said.data(), sizeof n);
    return n;
  }
};

// The body of one rank's process: start the runtime on the job's preset in timing mode,
// join the fabric, replay while the recorder hands what happened to the rank's analysis
// (and, with --keep, writes the replayed trace), then leave the analysis for the parent.
[[noreturn]] void rankProcess(const Job& job, int rank, int world, const std::string& file, uint32_t devices,
                              int address_fd, int pass_fd) {
  try {
    std::vector<std::string> inherited;   // nothing of the caller's CARDSIM_* setup leaks in
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, "CARDSIM_", 8) == 0) inherited.emplace_back(*e, std::strcspn(*e, "="));
    for (const auto& k : inherited) ::unsetenv(k.c_str());
    for (const auto& [k, v] : job.env) ::setenv(k.c_str(), v.c_str(), 1);
    ::setenv("RANK", std::to_string(rank).c_str(), 1);
    ::setenv("WORLD_SIZE", std::to_string(job.scale > 0 ? job.scale : world).c_str(), 1);
    if (job.scale > 0) ::setenv("CARDSIM_REPLAY_REPLICATED", "1", 1);   // marks a --keep trace
    shim::InitOptions o;
    o.backend = "sim";
    o.execution = "timing";
    o.preset = job.preset;
    o.devices = devices;
    o.overrides = job.overrides;
    o.status_board = false;   // a tool's short-lived helper: not a program cardsim smi lists
    o.move_data = false;      // nothing reads what the replayed copies would move
    if (shim::Status s = shim::initialize(o); !s.ok()) throw std::runtime_error(s.toString());
    if (address_fd >= 0) {
      char buf[256] = {0};
      ssize_t n = 0;
      while ((n = ::read(address_fd, buf, sizeof buf - 1)) < 0 && errno == EINTR) {
      }
      ::close(address_fd);
      if (n <= 0) throw std::runtime_error("the replay's fabric server did not start");
      if (shim::Status s = shim::fabricConnect(std::string(buf, static_cast<size_t>(n)), "replay", rank, world); !s.ok())
        throw std::runtime_error(s.toString());
    }
    const std::string replayed = job.out_dir.empty() ? std::string()
                                                     : job.out_dir + "/rank" + std::to_string(rank) + trace::kFileExtension;
    replay::RankAnalyzer analyzer(rank, replayed.empty() ? "rank " + std::to_string(rank) + " (replayed)" : replayed);
    analyzer.reserveFor(file);   // the replay re-records about as many records
    Summing summing(analyzer);
    if (shim::Status s = shim::traceStartObserved(job.out_dir, &summing); !s.ok()) throw std::runtime_error(s.toString());
    replay::ReplayOptions ro;
    ro.scale_ranks = job.scale;
    ro.keep_shapes = !job.out_dir.empty();
    ro.verified = true;   // runReplay verified every rank file before starting the ranks
    replay::RankReplayer(file, ro).run();
    if (shim::Status s = shim::traceStop(); !s.ok()) throw std::runtime_error(s.toString());
    {
      const std::string pass = replay::writePass(analyzer.finish());
      const std::string file = passFile(job.work_dir, rank);
      FILE* f = std::fopen(file.c_str(), "wb");
      const bool written = f && std::fwrite(pass.data(), 1, pass.size(), f) == pass.size();
      if (!f || std::fclose(f) != 0 || !written)
        throw std::runtime_error("cannot write the replay's summary to " + file + ": " + std::strerror(errno));
      const uint64_t n = pass.size();
      if (!writeAll(pass_fd, reinterpret_cast<const char*>(&n), sizeof n))
        throw std::runtime_error(std::string("cannot hand the replay's summary over: ") + std::strerror(errno));
      ::close(pass_fd);
    }
    // _Exit runs no exit handlers: leave the fabric first, so that a send this rank posted
    // last reaches the server before its connection closes (its receiver waits for it).
    if (shim::Status s = shim::fabricDisconnect(); !s.ok()) throw std::runtime_error(s.toString());
    std::fflush(stdout);
    std::_Exit(0);
  } catch (const trace::TraceError& e) {   // the input is bad, not the replay: exit status 2
    std::fprintf(stderr, "cardsim replay: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    std::_Exit(2);
  } catch (const replay::WhatIfError& e) {   // the what-if's fault, as bad input is: exit 2
    std::fprintf(stderr, "cardsim replay: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    std::_Exit(2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cardsim replay: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    std::_Exit(3);
  }
}

}  // namespace

int runReplay(const std::vector<std::string>& argv) {
  Args a("replay", kFlags, argv);
  if (a.has("help")) {
    std::fputs(Args::usage("replay", kFlags, "PATH",
                           "PATH: a trace directory, one rank file, or Chakra traces' PREFIX or .et file")
                   .c_str(),
               stdout);
    return 0;
  }
  if (a.positional().size() != 1) throw UsageError("cardsim replay: expected one PATH (a trace directory or rank file)");
  const std::string path = a.positional()[0];
  const std::string tmp = makeTempDir();
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      if (!removeTree(dir)) std::fprintf(stderr, "cardsim replay: could not remove %s\n", dir.c_str());
    }
  } cleanup{tmp};
  cleanUpOnSignals(tmp);
  // Chakra execution traces become cardsim traces first (ChakraImport.h).
  const bool chakra = replay::isChakraPath(path);
  replay::ChakraImport imported;
  if (chakra) {
    ::mkdir((tmp + "/chakra").c_str(), 0777);
    imported = replay::importChakra(path, tmp + "/chakra");
    if (!a.has("preset") && imported.preset.empty())
      throw UsageError("cardsim replay: " + path + " is a Chakra trace that names no preset: give --preset P");
  }
  if (!chakra) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      throw trace::TraceError(path + ": no such trace file or directory (nor a Chakra trace " + path + ".0.et)");
  }
  std::map<int, std::string> ended;   // each rank's recording: how it ended
  const std::map<int, std::string> files = chakra ? imported.files : traceRankFiles(path, &ended);   // validated
  trace::Header h0;
  {
    trace::TraceReader r(files.begin()->second);
    h0 = r.header();
  }
  const int world = std::max(1, h0.world_size());
  const long long ranks = a.integer("ranks", 0);
  if (a.has("ranks") && ranks < 1) throw UsageError("cardsim replay: --ranks must be at least 1, got " + a.get("ranks"));
  if (ranks > sim::FabricModel::kMaxRanks)
    throw UsageError("cardsim replay: --ranks " + a.get("ranks") + " is over the limit of " +
                     std::to_string(sim::FabricModel::kMaxRanks) +
                     " (the fabric model's routes take memory growing as the square of the ranks)");
  if (a.has("json") && a.get("json") != "-")
    if (const std::string why = unwritableReason(a.get("json")); !why.empty())
      throw UsageError("cardsim replay: --json " + a.get("json") + ": cannot write there: " + why);
  Job job;
  job.work_dir = tmp;
  job.overrides = a.all("set");
  // Every rank file of the job: replayed as recorded (or rank 0 standing for --ranks N).
  // One rank file of a larger job: that rank standing for the job's world (or --ranks N),
  // as a data-parallel rank does.
  const bool whole_job = files.size() == static_cast<std::size_t>(world);
  job.scale = 0;
  if (a.has("ranks") && (ranks != world || !whole_job)) job.scale = static_cast<int>(ranks);
  if (!a.has("ranks") && !whole_job) job.scale = world;
  if (job.scale == 0 && !whole_job)
    throw trace::TraceError(path + ": holds " + std::to_string(files.size()) + " of the job's " + std::to_string(world) +
                            " rank files; replay " + (chakra ? "the PREFIX of its PREFIX.<rank>.et files" : "the directory") +
                            ", or one rank file");
  if (a.has("preset")) {
    job.preset = a.get("preset");
  } else if (chakra) {
    job.preset = imported.preset;   // cardsim's own export names the recording's preset
  } else {
    job.preset = tmp + "/recorded.textproto";
    // Checked like any output: a write that fails (a full disk, a file size limit) must not
    // pass for a recording whose configuration does not parse.
    timeline::writeOutputFile(job.preset, [&](std::ostream& out) { out << h0.config_text(); });
    job.env["CARDSIM_REPLAY_PRESET"] = h0.preset();   // what a kept trace's header names
  }
  // The recording's own preference stands unless the what-if names another algorithm.
  bool algorithm_set = false;
  for (const std::string& o : job.overrides) algorithm_set = algorithm_set || sim::overrideKey(o) == "fabric.algorithm";
  for (const char* k : trace::kReplayedEnvironment) {
    auto it = h0.environment().find(k);
    if (it != h0.environment().end() && !(algorithm_set && std::string(k) == "CARDSIM_COLL_ALGO"))
      job.env[k] = it->second;
  }
  // Recorded before the fabric server moved answered collectives' ends (format 1.2): the
  // replay keeps every answer where it falls, as the recording did.
  if (!chakra && h0.format_major() == 1 && h0.format_minor() < 2) job.env["CARDSIM_FABRIC_REVISE"] = "0";
  // Recorded when a collective started on its stream after its call's launch overhead
  // (before format 1.3): the replay starts it there too.
  if (!chakra && h0.format_major() == 1 && h0.format_minor() < 3) job.env["CARDSIM_COLL_START"] = "launched";
  sim::SimOptions so;
  so.preset = job.preset;
  so.overrides = job.overrides;
  // Validates the preset and overrides (ConfigError names the key) before any process starts.
  // A preset without a fabric replays all but collectives (they fail in the ranks, naming it).
  if (job.env.count("CARDSIM_NODES")) ::setenv("CARDSIM_NODES", job.env["CARDSIM_NODES"].c_str(), 1);
  fabric::FabricParams fp;
  bool have_fabric = false;
  try {
    if (auto checked = checkWhatIf(so)) {
      fp = *checked;
      have_fabric = true;
    }
  } catch (const std::exception& e) {
    std::string msg = e.what();
    relabel(msg, a.has("preset") ? std::string() : job.preset, "the configuration recorded in " + files.begin()->second);
    throw sim::ConfigError(msg);
  }
  if (job.scale > 0 && have_fabric) {
    const uint32_t need = fabric::nodesFor(fp, static_cast<uint64_t>(job.scale));
    // The recording's node count grows to fit --ranks; one given with --set is the user's
    // what-if, refused rather than silently changed (as collbench does).
    std::string nodes_set;
    for (const std::string& o : job.overrides)
      if (sim::overrideKey(o) == "fabric.nodes") nodes_set = o;
    if (need > fp.nodes && !nodes_set.empty())
      throw UsageError("cardsim replay: --set " + nodes_set + ": " + std::to_string(fp.nodes) + " node(s) of " +
                       std::to_string(fp.devices_per_node) + " devices cannot hold --ranks " +
                       std::to_string(job.scale) + "; set at least " + std::to_string(need) +
                       " nodes, or leave the count unset to fit the ranks");
    if (need > fp.nodes) {
      job.env["CARDSIM_NODES"] = std::to_string(need);
      fp.nodes = need;
    }
  }
  job.out_dir = a.has("keep") ? a.get("keep") : std::string();
  if (a.has("keep") && job.out_dir.empty()) throw UsageError("cardsim replay: --keep needs a directory");
  bool keep_dir_made = false;   // --keep's directory is the replay's own: a failed replay removes it
  if (a.has("keep")) {
    // The replay writes rank<N>.cstrace there: never over a recording (the input's own
    // directory included) or another replay's files.
    struct stat st {};
    keep_dir_made = ::stat(job.out_dir.c_str(), &st) != 0;
    if (!keep_dir_made) {
      if (!S_ISDIR(st.st_mode)) throw UsageError("cardsim replay: --keep " + job.out_dir + " is not a directory");
      if (DIR* d = ::opendir(job.out_dir.c_str())) {
        std::string held;
        while (dirent* ent = ::readdir(d))
          if (isRankFileName(ent->d_name)) held = ent->d_name;
        ::closedir(d);
        if (!held.empty())
          throw UsageError("cardsim replay: --keep " + job.out_dir + " already holds trace files (" + held +
                           "); give a new or empty directory (the replay would overwrite them)");
      }
    }
  }
  if (!job.out_dir.empty())
    if (const std::string why = makeDirectories(job.out_dir); !why.empty())
      throw UsageError("cardsim replay: --keep " + job.out_dir + ": cannot create the directory: " + why);

  // Which recorded ranks run: all of them, or rank 0 standing for --ranks N.
  std::map<int, std::string> run = files;
  if (job.scale > 0) run = {{files.begin()->first, files.begin()->second}};
  const bool joined = job.scale == 0 && run.size() > 1;

  std::vector<RankChild> children;
  std::vector<int> address_fds;
  std::fflush(nullptr);
  for (const auto& [rank, file] : run) {
    int fds[2] = {-1, -1};
    if (joined && ::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    int pass[2] = {-1, -1};
    if (::pipe(pass) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    uint32_t devices = 1;
    {
      trace::TraceReader r(file);
      devices = std::max<uint32_t>(1, r.header().devices());
    }
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      helperProcessStarted(SIGKILL);
      if (joined) ::close(fds[1]);
      ::close(pass[0]);
      for (const RankChild& c : children) ::close(c.fd);   // the earlier ranks' pipes are the parent's
      rankProcess(job, rank, world, file, devices, joined ? fds[0] : -1, pass[1]);
    }
    ::close(pass[1]);
    childStarted(pid, SIGKILL);
    children.push_back(RankChild{rank, pid, pass[0], {}});
    if (joined) {
      ::close(fds[0]);
      address_fds.push_back(fds[1]);
    }
  }
  // The server starts after the forks: a forked child must not inherit its threads.
  std::unique_ptr<sim::FabricServer> server;
  if (joined) {
    try {
      sim::FabricServer::Options so{job.preset, "127.0.0.1", 0, false};
      so.local = true;   // the ranks are this host's processes: a Unix-domain socket costs less per message
      server = std::make_unique<sim::FabricServer>(fp, so);
      server->start();
    } catch (...) {
      for (const RankChild& c : children) ::kill(c.pid, SIGKILL);
      for (const RankChild& c : children) ::waitpid(c.pid, nullptr, 0);
      throw;
    }
    const std::string address =
        server->localAddress().empty() ? "127.0.0.1:" + std::to_string(server->port()) : server->localAddress();
    for (int fd : address_fds) {
      (void)!::write(fd, address.data(), address.size());
      ::close(fd);
    }
  }
  // Whichever rank fails first takes the others down at once (they could be waiting for it,
  // or for a rank that does not exist, in a collective). A rank is done once its summary
  // has come in whole; one whose pipe ends short of that failed.
  bool failed = false;
  bool bad_input = false;   // the first rank to fail found its trace file bad (exit 2)
  auto fail = [&](pid_t who) {
    int status = 0;
    while (::waitpid(who, &status, 0) < 0 && errno == EINTR) {
    }
    if (!failed) {
      for (const RankChild& c : children) ::kill(c.pid, SIGKILL);
      bad_input = WIFEXITED(status) && WEXITSTATUS(status) == 2;
    }
    failed = true;
  };
  for (;;) {
    std::vector<pollfd> wait;
    std::vector<RankChild*> of;
    for (RankChild& c : children)
      if (c.fd >= 0) {
        wait.push_back(pollfd{c.fd, POLLIN, 0});
        of.push_back(&c);
      }
    if (wait.empty()) break;
    if (::poll(wait.data(), wait.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    }
    for (std::size_t i = 0; i < wait.size(); ++i) {
      if (wait[i].revents == 0) continue;
      RankChild& c = *of[i];
      char buf[1 << 16];
      const ssize_t n = ::read(c.fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        c.said.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      ::close(c.fd);
      c.fd = -1;
      if (!c.complete()) fail(c.pid);
    }
  }
  sim::FabricModel::LinkLoads loads;
  if (server) {
    loads = server->linkLoads();
    server->stop(0.5);
  }
  // A failed replay leaves no replayed traces behind (they end short of their End record).
  auto discardKept = [&] {
    if (job.out_dir.empty()) return;
    for (const RankChild& c : children)
      std::remove((job.out_dir + "/rank" + std::to_string(c.rank) + trace::kFileExtension).c_str());
    if (keep_dir_made) ::rmdir(job.out_dir.c_str());
  };
  if (failed) {
    discardKept();
    std::fprintf(stderr, "cardsim replay: the replay of %s failed (see above)\n", path.c_str());
    return bad_input ? 2 : 1;
  }
  std::vector<replay::RankPass> passes(children.size());
  replay::inParallel(children.size(), [&](std::size_t i) {
    const std::string what = "the replay summary of rank " + std::to_string(children[i].rank);
    const std::string file = passFile(job.work_dir, children[i].rank);
    const MappedFile mapped(file);
    if (mapped.size() != children[i].length())
      throw std::runtime_error(what + ": " + file + " holds " + std::to_string(mapped.size()) + " of its " +
                               std::to_string(children[i].length()) + " bytes");
    const std::string_view bytes = mapped.bytes();
    passes[i] = replay::readPass(bytes, what);
    replay::buildIndex(passes[i].rd);   // here, in parallel, rather than in merge
  });
  // Replicated ranks time their collectives in-process: the links' loads are the model's
  // for the collectives the replicated rank ran.
  if (job.scale > 0 && have_fabric) loads = retimedLinkLoads(passes.front().collectives, fp);
  replay::Report report = replay::merge(std::move(passes));
  // Every summary came in whole; the processes have ended meanwhile, or end now.
  for (const RankChild& c : children) {
    int status = 0;
    while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = true;
  }
  if (failed) {
    discardKept();
    std::fprintf(stderr, "cardsim replay: the replay of %s failed (see above)\n", path.c_str());
    return 1;
  }
  // A run cut short (a rank killed by a signal) replays as far as it was recorded: say so.
  for (const auto& [rank, reason] : ended)
    if (reason.rfind("signal", 0) == 0)
      report.notes.push_back("rank " + std::to_string(rank) + "'s recording ended by " + reason +
                             ": the run was cut short; the replay covers what was recorded");
  // "as recorded": the recording's own configuration, unless overrides changed it.
  if (!a.has("preset")) report.preset = h0.preset();
  report.configuration = a.has("preset") ? "preset" : job.overrides.empty() ? "as recorded" : "recorded";
  if (!job.overrides.empty()) report.configuration += ", with --set";
  for (const auto& [name, u] : loads) {
    replay::LinkLoad l;
    l.name = name;
    l.bytes = u.bytes;
    l.busy_us = u.bandwidth_bytes_per_s > 0 ? u.bytes / u.bandwidth_bytes_per_s * 1e6 : 0;
    l.utilization = report.total_us > 0 ? l.busy_us / report.total_us : 0;
    report.links.push_back(l);
  }
  std::stable_sort(report.links.begin(), report.links.end(),
                   [](const replay::LinkLoad& x, const replay::LinkLoad& y) { return x.busy_us > y.busy_us; });
  std::string what = path;
  if (job.scale > 0)
    what += " (rank " + std::to_string(run.begin()->first) + " replicated to " + std::to_string(job.scale) + " ranks)";
  // --json -: the JSON on stdout, for a pipe; the table then goes to stderr.
  const bool json_to_stdout = a.has("json") && a.get("json") == "-";
  printReport(report, what, json_to_stdout ? stderr : stdout);
  if (json_to_stdout) {
    const std::string json = jsonReport(report, path, job.scale);
    std::fwrite(json.data(), 1, json.size(), stdout);
  } else if (a.has("json")) {
    try {
      timeline::writeOutputFile(a.get("json"), [&](std::ostream& out) { out << jsonReport(report, path, job.scale); });
    } catch (const std::runtime_error& e) {   // the output's problem (a full disk), as export's
      throw UsageError(std::string("cardsim replay: --json ") + e.what());
    }
  }
  return 0;
}

}  // namespace cardsim::cli
