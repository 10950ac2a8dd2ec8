// cardsim export PATH [--perfetto OUT.json] [--chakra PREFIX]: a recorded run in other tools'
// formats (at least one). PATH is
// a trace directory (every rank<N>.cstrace in it, which must be ranks 0..world_size-1) or
// one rank file, checked as `cardsim info` checks it: a truncated, corrupt, foreign or
// newer-major file, or a missing rank file, is an error naming it (exit status 2), and
// nothing is written. Formats: --perfetto (Chrome Trace Event JSON for ui.perfetto.dev and
// chrome://tracing, traces/export/PerfettoWriter), --chakra (MLCommons Chakra execution
// traces for ASTRA-sim, PREFIX.<rank>.et and PREFIX.comm_groups.json, ChakraWriter). Each
// format is a writer of its own over the run read once (traces/export/RunTimeline).

#include <cstdio>
#include <functional>
#include <iostream>

#include "traces/cli/Args.h"
#include "traces/cli/Commands.h"
#include "traces/cli/LinkLoads.h"
#include "traces/cli/TraceFiles.h"
#include "traces/export/ChakraWriter.h"
#include "traces/export/OutputFile.h"
#include "traces/export/PerfettoWriter.h"
#include "traces/export/RunTimeline.h"
#include "traces/lib/TraceError.h"
#include "traces/lib/TraceFormat.h"

namespace cardsim::cli {

namespace {

const std::vector<FlagSpec> kFlags = {
    {"perfetto", true, false, "write Chrome Trace Event JSON to FILE (open it in ui.perfetto.dev or chrome://tracing)"},
    {"chakra", true, false,
     "write MLCommons Chakra execution traces PREFIX.<rank>.et and PREFIX.comm_groups.json (ASTRA-sim's "
     "--comm-group-configuration)"},
    {"help", false, false, "this help"},
};

// An output that cannot be written is a usage error (exit status 2), naming the file; "-"
// is standard output.
void writeFile(const std::string& out, const std::function<void(std::ostream&)>& write) {
  if (out == "-") {
    write(std::cout);
    std::cout.flush();
    return;
  }
  try {
    timeline::writeOutputFile(out, write);
  } catch (const std::runtime_error& e) {
    throw UsageError(std::string("cardsim export: ") + e.what());
  }
}

}  // namespace

int runExport(const std::vector<std::string>& argv) {
  Args a("export", kFlags, argv);
  if (a.has("help")) {
    std::fputs(Args::usage("export", kFlags, "PATH", "PATH: a trace directory or one rank file").c_str(), stdout);
    return 0;
  }
  if (a.positional().size() != 1)
    throw UsageError("cardsim export: expected one PATH (a trace directory or a rank" +
                     std::string(trace::kFileExtension) + " file), got " + std::to_string(a.positional().size()));
  if (!a.has("perfetto") && !a.has("chakra"))
    throw UsageError("cardsim export: say what to write: --perfetto OUT.json and/or --chakra PREFIX");
  const std::string path = a.positional()[0];
  const std::string out = a.has("perfetto") ? a.get("perfetto") : "", prefix = a.has("chakra") ? a.get("chakra") : "";
  if (a.has("perfetto") && out.empty()) throw UsageError("cardsim export: --perfetto needs a file name");
  if (a.has("chakra") && (prefix.empty() || prefix.back() == '/'))
    throw UsageError("cardsim export: --chakra needs a file name prefix (PREFIX.<rank>.et), got '" + prefix + "'");
  if (a.has("chakra") && prefix == "-")
    throw UsageError("cardsim export: --chakra writes several files (PREFIX.<rank>.et, PREFIX.comm_groups.json), "
                     "which standard output cannot hold: give a file name prefix");
  // Both outputs are checked before either is written: a failure leaves nothing behind.
  // With the timeline on standard output, what was written is said on standard error.
  FILE* said = out == "-" ? stderr : stdout;
  if (a.has("perfetto") && out != "-")
    if (const std::string why = unwritableReason(out); !why.empty())
      throw UsageError("cardsim export: --perfetto " + out + ": cannot write there: " + why);
  if (a.has("chakra"))
    if (const std::string why = unwritableReason(prefix + ".0.et"); !why.empty())
      throw UsageError("cardsim export: --chakra " + prefix + ": cannot write " + prefix + ".0.et: " + why);
  try {
    const timeline::RunTimeline run(traceRankFiles(path));
    if (a.has("chakra"))   // every rank's file and the groups file, before anything is written
      for (std::size_t r = 0; r <= run.ranks().size(); ++r) {
        const std::string file = r < run.ranks().size() ? prefix + "." + std::to_string(run.ranks()[r].rank) + ".et"
                                                        : prefix + ".comm_groups.json";
        if (const std::string why = unwritableReason(file); !why.empty())
          throw UsageError("cardsim export: --chakra " + prefix + ": cannot write " + file + ": " + why);
      }
    if (a.has("chakra")) {
      timeline::ChakraWriter::Summary c;
      try {
        c = timeline::ChakraWriter(run).write(prefix);
      } catch (const std::runtime_error& e) {
        throw UsageError(std::string("cardsim export: ") + e.what());
      }
      std::fprintf(said, "wrote %s ... %s: %llu nodes (%llu compute, %llu collective, %llu send/recv, %llu event markers, "
                  "%llu host), "
                  "%llu dependencies, %llu process groups\n",
                  c.files.front().c_str(), c.files.back().c_str(), static_cast<unsigned long long>(c.nodes),
                  static_cast<unsigned long long>(c.compute_nodes), static_cast<unsigned long long>(c.collective_nodes),
                  static_cast<unsigned long long>(c.point_to_point_nodes),
                  static_cast<unsigned long long>(c.marker_nodes), static_cast<unsigned long long>(c.host_nodes),
                  static_cast<unsigned long long>(c.dependencies),
                  static_cast<unsigned long long>(c.groups));
      if (c.pretimed_steps)
        std::fprintf(said, "note: %llu communication step(s) timed by their caller, of no Chakra collective type, are "
                    "COMP_NODEs of their recorded duration\n",
                    static_cast<unsigned long long>(c.pretimed_steps));
      if (!a.has("perfetto")) return 0;
    }
    timeline::PerfettoWriter::Summary s;
    std::string no_links;
    timeline::PerfettoWriter writer(run);
    writer.setLinkLoads(fabricLinkLoads(run, &no_links));
    writeFile(out, [&](std::ostream& f) { s = writer.write(f); });
    std::fprintf(said, "wrote %s: %llu device commands and %llu host calls on %llu tracks, %llu flows, %llu memory samples\n",
                out == "-" ? "standard output" : out.c_str(), static_cast<unsigned long long>(s.device_slices),
                static_cast<unsigned long long>(s.host_slices), static_cast<unsigned long long>(s.tracks),
                static_cast<unsigned long long>(s.flows), static_cast<unsigned long long>(s.memory_samples));
    if (s.link_counters)
      std::fprintf(said, "fabric links: %llu utilization counters, %llu samples (the recording's collectives timed again by "
                  "its fabric model)\n",
                  static_cast<unsigned long long>(s.link_counters), static_cast<unsigned long long>(s.link_samples));
    // What the timeline cannot show, so that a missing arrow or counter step is explained.
    if (s.overflow_tracks)
      std::fprintf(said, "note: %llu overflow track(s) hold device commands that overlapped others on their stream\n",
                  static_cast<unsigned long long>(s.overflow_tracks));
    if (run.uncorrelatedCommands())
      std::fprintf(said, "note: %llu device command(s) not tied to a recorded call have no submit arrow\n",
                  static_cast<unsigned long long>(run.uncorrelatedCommands()));
    if (run.repairedCollectiveCalls())
      std::fprintf(said, "note: %llu collective command(s) tied to their collective call by order: the trace ties them "
                  "to the call running when their stream reached them (args.recorded_call)\n",
                  static_cast<unsigned long long>(run.repairedCollectiveCalls()));
    if (run.waitsWithoutRecord())
      std::fprintf(said, "note: %llu event wait(s) on an event recorded before the trace began have no arrow\n",
                  static_cast<unsigned long long>(run.waitsWithoutRecord()));
    if (run.unpairedCollectives())
      std::fprintf(said, "note: %llu collective(s) have members on ranks whose files are not in %s\n",
                  static_cast<unsigned long long>(run.unpairedCollectives()), path.c_str());
    if (run.unmatchedFrees())
      std::fprintf(said, "note: %llu free(s) of memory allocated before the trace began are not in the memory counters\n",
                  static_cast<unsigned long long>(run.unmatchedFrees()));
    return 0;
  } catch (const trace::TraceError& e) {
    std::fprintf(stderr, "cardsim export: %s\n", e.what());
    return 2;
  }
}

}  // namespace cardsim::cli
