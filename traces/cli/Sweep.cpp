// cardsim sweep PATH --set key=v1,v2,... [--set ...]: replays a recorded run once per
// combination of the swept values (the cartesian product of every --set with a comma list;
// a --set with one value applies to all), several at once where cores allow, and writes
// PREFIX.csv (one row per combination: the swept values, total_us and the job's breakdown,
// the mean over its ranks) and PREFIX.png (total time and breakdown against the swept values).
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "simulator/Config.h"
#include "simulator/FabricConfig.h"
#include "traces/cli/Args.h"
#include "traces/cli/Commands.h"
#include "traces/cli/LiveCollbench.h"
#include "traces/cli/TraceFiles.h"
#include "traces/cli/WhatIf.h"
#include "traces/replay/ChakraImport.h"
#include "traces/export/OutputFile.h"
#include "traces/lib/TraceReader.h"

namespace cardsim::cli {

namespace {

const std::vector<FlagSpec> kFlags = {
    {"set", true, true, "key.path=v1,v2,... (swept; [a,b] is one value holding commas) or key.path=value (fixed)"},
    {"preset", true, false, "replay on this preset instead of the recording's configuration"},
    {"ranks", true, false, "replicate the recorded data-parallel rank 0 to N ranks"},
    {"out", true, false, "output prefix: PREFIX.csv and PREFIX.png (default: sweep)"},
    {"jobs", true, false, "replays at once (default: the online CPUs)"},
    {"no-plot", false, false, "write the CSV only"},
    {"help", false, false, "this help"},
};

const char* kColumns[] = {"total_us", "compute_us", "memory_bound_us", "copies_us", "communication_us",
                          "exposed_communication_us", "idle_us"};

struct Dimension {
  std::string key;
  std::vector<std::string> values;
};

// The comma list of a --set. A value in square brackets keeps its commas, so that a key
// whose own value is a list can be swept: fabric.library_algorithms=[ring,tree],[ring].
std::vector<std::string> splitValues(const std::string& key, const std::string& list) {
  std::vector<std::string> out;
  auto add = [&](std::string cur) {
    const auto a = cur.find_first_not_of(" \t"), z = cur.find_last_not_of(" \t");
    if (a == std::string::npos)
      throw UsageError("cardsim sweep: --set " + key + ": an empty value in '" + list + "'");
    cur = cur.substr(a, z - a + 1);
    if (cur.front() == '[') {
      if (cur.size() < 2 || cur.back() != ']')
        throw UsageError("cardsim sweep: '" + cur + "' in '" + list + "' opens a [ it does not close with ]");
      cur = cur.substr(1, cur.size() - 2);
      if (cur.find_first_not_of(" \t") == std::string::npos)
        throw UsageError("cardsim sweep: an empty value [] in '" + list + "'");
    } else if (cur.find_first_of("[]") != std::string::npos) {
      throw UsageError("cardsim sweep: '" + cur + "' in '" + list +
                       "': a bracketed value is the whole value between commas ([a,b],[c])");
    }
    out.push_back(cur);
  };
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) throw UsageError("cardsim sweep: a ] without its [ in '" + list + "'");
    if (c == ',' && depth == 0) {
      add(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) throw UsageError("cardsim sweep: a [ without its ] in '" + list + "'");
  add(cur);
  return out;
}

// The number after "key": in the replay's JSON, within its top-level "breakdown" object
// (or at the top level for total_us).
double jsonNumber(const std::string& json, const std::string& key, bool in_breakdown) {
  std::size_t from = 0;
  if (in_breakdown) {
    from = json.find("], \"breakdown\": {");
    if (from == std::string::npos) throw std::runtime_error("the replay's report has no breakdown");
  }
  const std::string needle = "\"" + key + "\": ";
  const std::size_t at = json.find(needle, from);
  if (at == std::string::npos) throw std::runtime_error("the replay's report has no " + key);
  return std::strtod(json.c_str() + at + needle.size(), nullptr);
}

std::string selfExe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot find the cardsim executable (/proc/self/exe)");
  return std::string(buf, static_cast<std::size_t>(n));
}

// Starts `args` (args[0] found on PATH unless it holds a '/') with no shell between, its
// output into `log` when one is named; returns its pid.
pid_t spawn(std::vector<std::string> args, const std::string& log = {}) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    helperProcessStarted(SIGTERM);   // a replay: it takes its own ranks down on SIGTERM
    if (!log.empty() && (!std::freopen(log.c_str(), "w", stdout) || !std::freopen(log.c_str(), "a", stderr)))
      std::_Exit(127);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "cardsim sweep: cannot run %s: %s\n", argv[0], std::strerror(errno));
    std::_Exit(127);
  }
  return pid;
}

std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

void progress(std::size_t done, std::size_t total, std::size_t failed) {
  const std::string failures = failed ? " (" + std::to_string(failed) + " failed)" : std::string();
  if (!::isatty(STDERR_FILENO)) {
    std::fprintf(stderr, "cardsim sweep: %zu/%zu replays done%s\n", done, total, failures.c_str());
    return;
  }
  const int width = 30, fill = static_cast<int>(width * done / std::max<std::size_t>(total, 1));
  std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu%s", fill, "##############################", width - fill, "", done, total,
               failures.c_str());
  if (done == total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace

int runSweep(const std::vector<std::string>& argv) {
  // A reader of the table that goes away (| head) must not cost the CSV and the plot.
  std::signal(SIGPIPE, SIG_IGN);
  Args a("sweep", kFlags, argv);
  if (a.has("help")) {
    std::fputs(Args::usage("sweep", kFlags, "PATH", "PATH: a trace directory or one rank file, as cardsim replay takes")
                   .c_str(),
               stdout);
    return 0;
  }
  if (a.positional().size() != 1)
    throw UsageError("cardsim sweep: expected one PATH (a trace directory, a rank file, or Chakra traces' PREFIX)");
  const std::string path = a.positional()[0];
  std::string recorded_preset;   // the recording's preset by name (its values are checked on it)
  // A bad trace fails here, once, not in every replay.
  if (replay::isChakraPath(path)) {
    char tmpl[] = "/tmp/cardsim-sweep-check-XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::runtime_error(std::string("cannot create a temporary directory: ") + std::strerror(errno));
    const std::string check = tmpl;
    try {
      (void)replay::importChakra(path, check);
    } catch (...) {
      removeTree(check);
      throw;
    }
    removeTree(check);
  } else {
    const std::map<int, std::string> files = traceRankFiles(path);
    recorded_preset = trace::TraceReader(files.begin()->second).header().preset();
  }

  std::vector<Dimension> dims;
  std::vector<std::string> fixed;
  for (const std::string& s : a.all("set")) {
    const std::size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0) throw UsageError("cardsim sweep: --set expects key.path=v1,v2,..., got '" + s + "'");
    Dimension d{s.substr(0, eq), splitValues(s.substr(0, eq), s.substr(eq + 1))};
    if (d.values.size() == 1) fixed.push_back(d.key + "=" + d.values[0]);
    else dims.push_back(std::move(d));
  }
  if (dims.empty()) throw UsageError("cardsim sweep: nothing to sweep: give at least one --set key.path=v1,v2,...");
  {
    // A key under its full path ("device.memory.bandwidth") is the same key.
    std::map<std::string, std::string> keys;
    for (const std::string& s : a.all("set")) {
      const std::string key = s.substr(0, s.find('='));
      const std::string same = key.rfind("device.", 0) == 0 ? key.substr(7) : key;
      if (auto [it, fresh] = keys.emplace(same, key); !fresh)
        throw UsageError("cardsim sweep: --set " + key + " is given twice" +
                         (it->second != key ? " (as " + it->second + ")" : std::string()) +
                         "; give its values once, comma-separated");
    }
  }
  std::string prefix = a.get("out", "sweep");
  // "--out results.csv" means the prefix "results" (not results.csv.csv and results.csv.png).
  for (const char* ext : {".csv", ".png"})
    if (prefix.size() > 4 && prefix.compare(prefix.size() - 4, 4, ext) == 0) prefix.resize(prefix.size() - 4);
  if (prefix.empty() || prefix.back() == '/')
    throw UsageError("cardsim sweep: --out needs a file name prefix (PREFIX.csv, PREFIX.png), got '" + prefix + "'");
  long long jobs = a.integer("jobs", std::max(1u, std::thread::hardware_concurrency()));
  if (jobs < 1) throw UsageError("cardsim sweep: --jobs must be at least 1");
  // What every replay would refuse, refused once before any runs.
  if (a.has("ranks") && a.integer("ranks", 0) < 1)
    throw UsageError("cardsim sweep: --ranks must be at least 1, got " + a.get("ranks"));
  if (a.has("preset")) {
    sim::SimOptions so;
    so.preset = a.get("preset");
    (void)sim::loadDeviceParams(so);   // ConfigError names an unknown preset
  }
  // Every value of every swept key, checked before any replay runs (a replay would refuse
  // it by key, after the points before it ran): on the preset, or on the recorded preset's
  // namesake (a recording with a configuration of its own leaves its values to the replays).
  {
    sim::SimOptions so;
    so.preset = a.has("preset") ? a.get("preset") : recorded_preset;
    bool checkable = !so.preset.empty();
    if (checkable) {
      try {
        (void)sim::loadDeviceParams(so);   // (a named preset passed above)
      } catch (const sim::ConfigError&) {
        checkable = false;   // the recording's own configuration, not a preset of this name
      }
    }
    for (const Dimension& d : dims) {
      if (!checkable) break;
      for (const std::string& v : d.values) {
        so.overrides = fixed;
        so.overrides.push_back(d.key + "=" + v);
        try {
          (void)checkWhatIf(so);   // ConfigError names the key and the value
        } catch (const sim::ConfigError& e) {
          if (a.has("preset")) throw;
          // Checked on the recording's preset, as a replay of it takes it: said so.
          std::string msg = e.what();
          const std::string named = "preset " + so.preset;
          if (msg.rfind(named, 0) == 0) msg.replace(0, named.size(), "the recording's preset " + so.preset);
          throw sim::ConfigError(msg);
        }
      }
    }
  }
  // Its outputs' places, checked before any replay runs.
  std::vector<std::string> outputs = {prefix + ".csv"};
  if (!a.has("no-plot")) outputs.push_back(prefix + ".png");
  for (const std::string& out : outputs)
    if (const std::string why = unwritableReason(out); !why.empty())
      throw UsageError("cardsim sweep: --out " + prefix + ": cannot write " + out + ": " + why);

  // The combinations, in order: the last dimension varies fastest.
  std::vector<std::vector<std::size_t>> combos(1);
  for (const Dimension& d : dims) {
    std::vector<std::vector<std::size_t>> next;
    for (const auto& c : combos)
      for (std::size_t i = 0; i < d.values.size(); ++i) {
        next.push_back(c);
        next.back().push_back(i);
      }
    combos = std::move(next);
  }

  char tmpl[] = "/tmp/cardsim-sweep-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error(std::string("cannot create a temporary directory: ") + std::strerror(errno));
  const std::string tmp = tmpl;
  cleanUpOnSignals(tmp);
  const std::string exe = selfExe();
  std::map<pid_t, std::size_t> running;
  std::vector<int> status(combos.size(), -1);
  std::size_t next = 0, done = 0, failures = 0;
  std::fflush(nullptr);
  progress(0, combos.size(), 0);
  while (done < combos.size()) {
    while (next < combos.size() && static_cast<long long>(running.size()) < jobs) {
      std::vector<std::string> args = {exe, "replay", path, "--json", tmp + "/" + std::to_string(next) + ".json"};
      if (a.has("preset")) args.insert(args.end(), {"--preset", a.get("preset")});
      if (a.has("ranks")) args.insert(args.end(), {"--ranks", a.get("ranks")});
      for (const auto& f : fixed) args.insert(args.end(), {"--set", f});
      for (std::size_t d = 0; d < dims.size(); ++d) args.insert(args.end(), {"--set", dims[d].key + "=" + dims[d].values[combos[next][d]]});
      const pid_t child = spawn(args, tmp + "/" + std::to_string(next) + ".log");
      childStarted(child, SIGTERM);
      running[child] = next;
      ++next;
    }
    int st = 0;
    const pid_t pid = ::wait(&st);
    if (pid < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("wait: ") + std::strerror(errno));
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;
    childEnded(pid);
    status[it->second] = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    failures += status[it->second] != 0;
    running.erase(it);
    progress(++done, combos.size(), failures);
  }

  std::ostringstream csv;
  for (const Dimension& d : dims) csv << csvField(d.key) << ",";
  for (std::size_t c = 0; c < std::size(kColumns); ++c) csv << kColumns[c] << (c + 1 < std::size(kColumns) ? "," : "\n");
  int failed = 0;
  bool all_bad_input = true;   // every failure a usage or configuration error (exit status 2)
  for (std::size_t i = 0; i < combos.size(); ++i) {
    std::string label;
    for (std::size_t d = 0; d < dims.size(); ++d) label += (d ? " " : "") + dims[d].key + "=" + dims[d].values[combos[i][d]];
    if (status[i] != 0) {
      std::ifstream log(tmp + "/" + std::to_string(i) + ".log");
      std::stringstream msg;
      msg << log.rdbuf();
      std::fprintf(stderr, "cardsim sweep: the replay with %s failed:\n%s", label.c_str(), msg.str().c_str());
      ++failed;
      all_bad_input = all_bad_input && status[i] == 2;
      continue;
    }
    std::ifstream in(tmp + "/" + std::to_string(i) + ".json");
    std::stringstream json;
    json << in.rdbuf();
    for (std::size_t d = 0; d < dims.size(); ++d) csv << csvField(dims[d].values[combos[i][d]]) << ",";
    for (std::size_t c = 0; c < std::size(kColumns); ++c) {
      char b[64];
      std::snprintf(b, sizeof b, "%.6f", jsonNumber(json.str(), kColumns[c], c > 0));
      csv << b << (c + 1 < std::size(kColumns) ? "," : "\n");
    }
  }
  (void)removeTree(tmp);
  if (failed) {
    std::fprintf(stderr, "cardsim sweep: %d of %zu replays failed; no output written\n", failed, combos.size());
    return all_bad_input ? 2 : 1;
  }
  const std::string csv_path = prefix + ".csv";
  timeline::writeOutputFile(csv_path, [&](std::ostream& out) { out << csv.str(); });
  std::printf("%s", csv.str().c_str());
  std::printf("wrote %s\n", csv_path.c_str());
  if (a.has("no-plot")) return 0;
  const std::string png = prefix + ".png";
  // The plotter gets its paths as arguments, not through a shell (a quote in a path is then
  // just a character); it says itself what it could not write.
  std::fflush(nullptr);
  const pid_t plotter = spawn({cardsimPython(), "-m", "cardsim_tools.sweep_plot", csv_path, png});
  int plot_status = 0;
  while (::waitpid(plotter, &plot_status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(plot_status) || WEXITSTATUS(plot_status) != 0) {
    std::fprintf(stderr, "cardsim sweep: plotting %s failed (the CSV is complete; --no-plot skips the plot)\n", png.c_str());
    return 1;
  }
  std::printf("wrote %s\n", png.c_str());
  return 0;
}

}  // namespace cardsim::cli
