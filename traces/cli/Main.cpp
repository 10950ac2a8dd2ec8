// cardsim: the project's one command-line tool. Subcommands come from the table below;
// an unknown one lists the valid names.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#ifdef __GLIBC__   // (defined by the headers above)
#include <malloc.h>
#endif

#include <google/protobuf/stubs/logging.h>

#include "simulator/Config.h"
#include "simulator/FabricWire.h"
#include "traces/cli/Args.h"
#include "traces/cli/Commands.h"
#include "traces/lib/TraceError.h"
#include "traces/lib/TraceFormat.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>&);
};

constexpr Command kCommands[] = {
    {"collbench", "time collectives over a preset's fabric (nccl-tests style table or CSV)",
     &cardsim::cli::runCollbench},
    {"devices", "the devices a process would see and the backend serving them (emulator or vendor runtime)",
     &cardsim::cli::runDevices},
    {"export", "a recorded run as a timeline (--perfetto OUT.json) or as Chakra execution traces (--chakra PREFIX)", &cardsim::cli::runExport},
    {"fabricd", "serve one collective fabric to the ranks of jobs (CARDSIM_FABRIC=host:port)",
     &cardsim::cli::runFabricd},
    {"info", "what a trace holds: preset, ranks, record counts, recorded_total_us", &cardsim::cli::runInfo},
    {"replay", "re-time a recorded run on a preset and overrides (what-if), or at --ranks N",
     &cardsim::cli::runReplay},
    {"sweep", "replay a recording over a grid of --set values; CSV and plot of time and breakdown",
     &cardsim::cli::runSweep},
};

void printHelp(FILE* out) {
  std::fprintf(out, "usage: cardsim COMMAND [options]   (cardsim COMMAND --help for its options;"
                    " cardsim --version)\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.summary);
}

// Only a fatal error of the library itself (it aborts after) is worth its own words.
void protobufLog(google::protobuf::LogLevel level, const char* file, int line, const std::string& message) {
  if (level == google::protobuf::LOGLEVEL_FATAL)
    std::fprintf(stderr, "cardsim: the protobuf library failed (%s:%d): %s\n", file, line, message.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // Output piped into a reader that left (`| head`): writes fail instead of the signal ending
  // the tool before it cleans up (a replay's temporary directory) and exits with its status.
  std::signal(SIGPIPE, SIG_IGN);
#ifdef __GLIBC__
  // A short-lived tool: memory it frees stays for its next allocations instead of going
  // back to the system and faulting in again page by page (a replay's rank process frees
  // and allocates large buffers all along; this saves a fifth of its page faults).
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
#endif
  // The protobuf library logs what it finds wrong in a message it parses (invalid UTF-8 in a
  // corrupt trace, say) to stderr; the tool says it itself, naming the file and the record.
  google::protobuf::SetLogHandler(&protobufLog);
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    printHelp(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V") || !std::strcmp(argv[1], "version")) {
    // What a trace header and a fabric server's handshake carry: enough to tell which reads which.
    std::printf("cardsim %s (trace format %u.%u, fabric protocol %u)\n", CARDSIM_VERSION,
                cardsim::trace::kFormatMajor, cardsim::trace::kFormatMinor, cardsim::sim::wire::kProtocolVersion);
    return 0;
  }
  const std::string name = argv[1];
  for (const Command& c : kCommands) {
    if (name != c.name) continue;
    try {
      const int status = c.run(std::vector<std::string>(argv + 2, argv + argc));
      // Output that did not get out (a full disk, a closed pipe) is a failure, not a success.
      if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
        std::fprintf(stderr, "cardsim %s: cannot write its output: %s\n", c.name, std::strerror(errno));
        return status != 0 ? status : 1;
      }
      return status;
    } catch (const cardsim::cli::UsageError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    } catch (const cardsim::sim::ConfigError& e) {   // a bad preset, key path or value
      std::fprintf(stderr, "cardsim %s: %s\n", c.name, e.what());
      return 2;
    } catch (const cardsim::trace::TraceError& e) {   // a bad, incomplete or missing trace file
      std::fprintf(stderr, "cardsim %s: %s\n", c.name, e.what());
      return 2;
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "cardsim %s: %s\n", c.name, e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cardsim %s: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::string valid;
  for (const Command& c : kCommands) valid += std::string(valid.empty() ? "" : ", ") + c.name;
  std::fprintf(stderr, "cardsim: unknown command '%s' (valid: %s)\n", name.c_str(), valid.c_str());
  return 2;
}
