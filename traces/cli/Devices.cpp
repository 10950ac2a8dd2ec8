// `cardsim devices [--backend B] [--preset P] [--devices N] [--json]`: the devices the
// shim sees and the backend that serves them (the emulator, or a vendor runtime in native
// mode), as a process of the user's would get them (CARDSIM_BACKEND, CARDSIM_PRESET,
// CARDSIM_DEVICES apply unless a flag says otherwise).
#include <cstdio>
#include <string>
#include <vector>

#include <cardsim/shim.h>

#include "traces/cli/Args.h"
#include "traces/cli/Commands.h"
#include "traces/cli/TraceFiles.h"

namespace cardsim::cli {
namespace {

const std::vector<FlagSpec> kFlags = {
    {"backend", true, false, "sim, native or auto (default: CARDSIM_BACKEND, else sim)"},
    {"preset", true, false, "the card (default: CARDSIM_PRESET, else mlu370-x8)"},
    {"devices", true, false, "how many devices the emulator shows (default: CARDSIM_DEVICES, else 8)"},
    {"json", false, false, "one JSON object instead of the table"},
    {"help", false, false, "this help"},
};

}  // namespace

int runDevices(const std::vector<std::string>& argv) {
  Args a("devices", kFlags, argv);
  if (a.has("help")) {
    std::printf("%s", Args::usage("devices", kFlags).c_str());
    return 0;
  }
  if (!a.positional().empty()) throw UsageError("cardsim devices: takes no file or other argument, got '" + a.positional()[0] + "'");
  shim::InitOptions o;
  o.backend = a.get("backend");
  o.preset = a.get("preset");
  const long long n = a.integer("devices", 0);
  if (n < 0) throw UsageError("cardsim devices: --devices must be >= 1, got " + std::to_string(n));
  o.devices = static_cast<uint32_t>(n);
  if (shim::Status st = shim::initialize(o); !st.ok()) {
    std::fprintf(stderr, "cardsim devices: %s\n", st.message().c_str());
    return st.code() == shim::Code::InitFailed && st.message().find("unknown backend") != std::string::npos ? 2 : 1;
  }
  int count = 0;
  if (shim::Status st = shim::getDeviceCount(&count); !st.ok()) {
    std::fprintf(stderr, "cardsim devices: %s\n", st.message().c_str());
    return 1;
  }
  std::vector<shim::DeviceProperties> props(static_cast<size_t>(count));
  for (int d = 0; d < count; ++d) {
    if (shim::Status st = shim::getDeviceProperties(&props[d], d); !st.ok()) {
      std::fprintf(stderr, "cardsim devices: device %d: %s\n", d, st.message().c_str());
      return 1;
    }
  }
  const std::string backend = shim::backendName();
  const std::string detail = count > 0 ? props[0].backend : backend;
  if (a.has("json")) {
    std::printf("{\"backend\": %s, \"backend_detail\": %s, \"devices\": [", jsonString(backend).c_str(),
                jsonString(detail).c_str());
    for (int d = 0; d < count; ++d) {
      const auto& p = props[d];
      std::printf("%s{\"index\": %d, \"name\": %s, \"vendor\": %s, \"preset\": %s, \"total_memory_bytes\": %llu, "
                  "\"cluster_count\": %u, \"cores_per_cluster\": %u}",
                  d ? ", " : "", d, jsonString(p.name).c_str(), jsonString(p.vendor).c_str(),
                  jsonString(p.preset).c_str(), static_cast<unsigned long long>(p.total_memory_bytes), p.cluster_count,
                  p.cores_per_cluster);
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("backend: %s\n", detail.c_str());
  std::printf("%-6s  %-24s  %10s  %8s  %13s  %s\n", "device", "name", "memory_MiB", "clusters", "cores/cluster", "preset");
  for (int d = 0; d < count; ++d) {
    const auto& p = props[d];
    std::printf("%-6d  %-24s  %10llu  %8u  %13u  %s\n", d, p.name.c_str(),
                static_cast<unsigned long long>(p.total_memory_bytes >> 20), p.cluster_count, p.cores_per_cluster,
                p.preset.c_str());
  }
  return 0;
}

}  // namespace cardsim::cli
