// cardsim info PATH [--json]: what a trace holds. PATH is a trace directory (every
// rank<N>.cstrace in it, which must be ranks 0..world_size-1) or one rank file. Prints the
// preset, the ranks, record counts by kind and the recorded makespan, recorded_total_us:
// from the first host call to the last device completion, across ranks (without device
// commands, to the last host call's end). Every file is read to its End record, so a
// truncated or corrupt file is an error (exit status 2) that names it, never a partial count.

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>

#include "traces/cli/Args.h"
#include "traces/cli/Commands.h"
#include "traces/cli/TraceFiles.h"
#include "traces/lib/TraceError.h"
#include "traces/lib/TraceFormat.h"
#include "traces/lib/TraceReader.h"

namespace cardsim::cli {

namespace {
const std::vector<FlagSpec> kFlags = {
    {"json", false, false, "print one JSON object (preset, world_size, ranks, records, recorded_total_us, ...)"},
    {"records", false, false, "also print every record, one per line (protobuf text format), rank by rank"},
    {"help", false, false, "this help"},
};

struct RankSummary {
  std::string file;
  trace::Header header;
  std::map<std::string, uint64_t> records;
  uint64_t calls = 0, commands = 0, uncorrelated = 0;
  uint64_t first_host_ps = std::numeric_limits<uint64_t>::max();
  uint64_t last_host_ps = 0;
  uint64_t last_device_ps = 0;
  bool any_device = false;
  std::string ended;   // the End record's reason: "exit", "api", "signal SIGTERM", ...
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The kind a record is counted under: "kernel_launch", "event_record", "api_set_device", ...
std::string kindOf(const trace::Envelope& e) {
  switch (e.record_case()) {
    case trace::Envelope::kName: return "name";
    case trace::Envelope::kAlloc: return "alloc";
    case trace::Envelope::kFree: return "free";
    case trace::Envelope::kMemcpy: return "memcpy";
    case trace::Envelope::kMemset: return "memset";
    case trace::Envelope::kKernel: return "kernel_launch";
    case trace::Envelope::kEvent: return "event_" + lower(trace::EventOp::Op_Name(e.event().op()));
    case trace::Envelope::kStream: return "stream_" + lower(trace::StreamOp::Op_Name(e.stream().op()));
    case trace::Envelope::kGraph: return "graph_" + lower(trace::GraphOp::Op_Name(e.graph().op()));
    case trace::Envelope::kCollective: return "collective";
    case trace::Envelope::kApi: return "api_" + lower(trace::ApiCall::Api_Name(e.api().api()));
    case trace::Envelope::kCommand: return "device_command";
    case trace::Envelope::kHeader: return "header";
    case trace::Envelope::kEnd: return "end";
    case trace::Envelope::RECORD_NOT_SET: break;
  }
  return "unknown";   // a kind from a newer minor version
}

RankSummary summarize(const std::string& path, bool print) {
  trace::TraceReader reader(path);
  RankSummary s;
  s.file = path;
  s.header = reader.header();
  if (print) std::printf("%s #0 %s\n", path.c_str(), s.header.ShortDebugString().c_str());
  while (const trace::Envelope* next = reader.next()) {
    const trace::Envelope& e = *next;
    if (print) std::printf("%s #%llu %s\n", path.c_str(), static_cast<unsigned long long>(reader.recordIndex() - 1),
                           e.ShortDebugString().c_str());
    ++s.records[kindOf(e)];
    if (e.record_case() == trace::Envelope::kCommand) {
      ++s.commands;
      if (e.command().call() == 0) ++s.uncorrelated;
      s.last_device_ps = std::max(s.last_device_ps, e.command().end_ps());
      s.any_device = true;
    } else if (e.call() != 0) {
      ++s.calls;
      if (!trace::movesClockOnly(e)) s.first_host_ps = std::min(s.first_host_ps, e.host_begin_ps());
      s.last_host_ps = std::max(s.last_host_ps, e.host_end_ps());
    }
  }
  s.ended = reader.end().reason();
  return s;
}

int run(const std::string& path, bool as_json, bool print) {
  std::vector<RankSummary> ranks;
  struct stat st {};
  const bool dir = ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  for (const auto& [n, file] : traceRankFiles(path)) ranks.push_back(summarize(file, print));

  std::map<std::string, uint64_t> records;
  uint64_t calls = 0, commands = 0, uncorrelated = 0;
  uint64_t first = std::numeric_limits<uint64_t>::max(), last_device = 0, last_host = 0;
  bool any_device = false;
  std::string preset;
  for (const RankSummary& r : ranks) {
    for (const auto& [k, n] : r.records) records[k] += n;
    calls += r.calls;
    commands += r.commands;
    uncorrelated += r.uncorrelated;
    first = std::min(first, r.first_host_ps);
    last_device = std::max(last_device, r.last_device_ps);
    last_host = std::max(last_host, r.last_host_ps);
    any_device = any_device || r.any_device;
    if (preset.find(r.header.preset()) == std::string::npos || preset.empty())
      preset += (preset.empty() ? "" : ",") + r.header.preset();
  }
  if (first == std::numeric_limits<uint64_t>::max()) first = 0;
  const uint64_t end = any_device ? last_device : last_host;
  const double total_us = end > first ? static_cast<double>(end - first) / 1e6 : 0.0;
  const trace::Header& h0 = ranks.front().header;

  if (as_json) {
    std::printf("{\"path\": %s, \"preset\": %s, \"device_name\": %s, \"devices\": %u, \"world_size\": %d, \"ranks\": [",
                jsonString(path).c_str(), jsonString(preset).c_str(), jsonString(h0.device_name()).c_str(), h0.devices(),
                h0.world_size());
    for (std::size_t i = 0; i < ranks.size(); ++i) std::printf("%s%d", i ? ", " : "", ranks[i].header.rank());
    std::printf("], \"format\": \"%u.%u\", \"cardsim_version\": %s, \"execution_mode\": %s, \"backend\": %s,",
                h0.format_major(), h0.format_minor(), jsonString(h0.cardsim_version()).c_str(),
                jsonString(h0.execution_mode()).c_str(), jsonString(h0.backend()).c_str());
    // What the recording's configuration changed from its preset (rank 0's; every rank's is checked alike on replay).
    std::printf(" \"overrides\": [");
    for (int i = 0; i < h0.overrides_size(); ++i)
      std::printf("%s%s", i ? ", " : "", jsonString(h0.overrides(i)).c_str());
    std::printf("], \"overrides_file\": %s,", jsonString(h0.overrides_file()).c_str());
    std::printf(" \"records\": {");
    bool firstk = true;
    for (const auto& [k, n] : records) {
      std::printf("%s%s: %llu", firstk ? "" : ", ", jsonString(k).c_str(), static_cast<unsigned long long>(n));
      firstk = false;
    }
    std::printf("}, \"host_calls\": %llu, \"device_commands\": %llu, \"uncorrelated_commands\": %llu,",
                static_cast<unsigned long long>(calls), static_cast<unsigned long long>(commands),
                static_cast<unsigned long long>(uncorrelated));
    std::printf(" \"first_host_ps\": %llu, \"last_host_end_ps\": %llu, \"last_device_end_ps\": %llu,",
                static_cast<unsigned long long>(first), static_cast<unsigned long long>(last_host),
                static_cast<unsigned long long>(last_device));
    std::printf(" \"recorded_total_us\": %.6f, \"files\": [", total_us);
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const RankSummary& r = ranks[i];
      std::printf("%s{\"rank\": %d, \"file\": %s, \"host_calls\": %llu, \"device_commands\": %llu, "
                  "\"last_device_end_ps\": %llu, \"ended\": %s}",
                  i ? ", " : "", r.header.rank(), jsonString(r.file).c_str(), static_cast<unsigned long long>(r.calls),
                  static_cast<unsigned long long>(r.commands), static_cast<unsigned long long>(r.last_device_ps),
                  jsonString(r.ended).c_str());
    }
    std::printf("]}\n");
    return 0;
  }

  std::printf("trace: %s\n", path.c_str());
  std::printf("preset: %s (%s, %u devices), cardsim %s, trace format %u.%u, %s mode, %s backend\n", preset.c_str(),
              h0.device_name().c_str(), h0.devices(), h0.cardsim_version().c_str(), h0.format_major(),
              h0.format_minor(), h0.execution_mode().c_str(), h0.backend().c_str());
  std::string present;
  for (const RankSummary& r : ranks) present += (present.empty() ? "" : " ") + std::to_string(r.header.rank());
  std::printf("ranks: %s of world size %d%s\n", present.c_str(), h0.world_size(), dir ? "" : " (one rank file)");
  // Recorded on the preset changed: replaying with --preset alone would answer another question.
  if (!h0.overrides_file().empty()) std::printf("configuration file: %s (CARDSIM_CONFIG)\n", h0.overrides_file().c_str());
  for (const std::string& o : h0.overrides()) std::printf("override: %s\n", o.c_str());
  std::printf("records:\n");
  for (const auto& [k, n] : records) std::printf("  %-24s %12llu\n", k.c_str(), static_cast<unsigned long long>(n));
  std::printf("host calls: %llu, device commands: %llu (%llu not tied to a recorded call)\n",
              static_cast<unsigned long long>(calls), static_cast<unsigned long long>(commands),
              static_cast<unsigned long long>(uncorrelated));
  // How each rank's recording ended: "exit", or "signal SIGTERM (rank 1); exit (ranks 0 2 3)".
  std::map<std::string, std::string> ended;
  for (const RankSummary& r : ranks) ended[r.ended] += (ended[r.ended].empty() ? "" : " ") + std::to_string(r.header.rank());
  std::string how;
  for (const auto& [reason, which] : ended) {
    how += (how.empty() ? "" : "; ") + (reason.empty() ? std::string("(not recorded)") : reason);
    if (ended.size() > 1) how += (which.find(' ') == std::string::npos ? " (rank " : " (ranks ") + which + ")";
  }
  std::printf("ended: %s\n", how.c_str());
  std::printf("recorded_total_us: %.3f\n", total_us);
  return 0;
}
}  // namespace

int runInfo(const std::vector<std::string>& argv) {
  Args a("info", kFlags, argv);
  if (a.has("help")) {
    std::fputs(Args::usage("info", kFlags, "PATH", "PATH: a trace directory or one rank file").c_str(), stdout);
    return 0;
  }
  if (a.positional().size() != 1)
    throw UsageError("cardsim info: expected one PATH (a trace directory or a rank" +
                     std::string(trace::kFileExtension) + " file), got " + std::to_string(a.positional().size()));
  if (a.has("json") && a.has("records"))
    throw UsageError("cardsim info: --records prints the records as text, --json one JSON object: give one of them");
  try {
    return run(a.positional()[0], a.has("json"), a.has("records"));
  } catch (const trace::TraceError& e) {
    std::fprintf(stderr, "cardsim info: %s\n", e.what());
    return 2;
  }
}

}  // namespace cardsim::cli
