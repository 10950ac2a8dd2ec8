#include "traces/replay/ChakraHostNode.h"

#include <cstdlib>
#include <sstream>

#include "traces/lib/TraceError.h"
#include "traces/lib/TraceFormat.h"
#include "traces/replay/ChakraAttributes.h"

namespace cardsim::replay {

using namespace chakra_attr;
using trace::TraceError;

std::set<int> wholeDevices(const chakra::Node& n, const std::string& where) {
  bool bad = false;
  std::set<int> whole;
  for (double d : byteList(n, "cardsim_synchronizes", &bad)) {
    if (bad || !(d >= 0 && d < kMaxDevices))
      throw TraceError(where + ": cardsim_synchronizes '" + text(n, "cardsim_synchronizes") +
                       "' is not a list of devices (0.." + std::to_string(kMaxDevices - 1) + ")");
    whole.insert(static_cast<int>(d));
  }
  return whole;
}

std::vector<HostSyncCall> syncCalls(const chakra::Node& n, const std::set<uint64_t>& deps, const std::string& where) {
  std::vector<HostSyncCall> calls;
  const std::string all = text(n, "cardsim_sync_calls");
  if (all.empty()) return calls;
  auto bad = [&](const std::string& part, const std::string& why) {
    return TraceError(where + ": cardsim_sync_calls '" + all + "': '" + part + "' " + why);
  };
  std::istringstream in(all);
  for (std::string part; std::getline(in, part, ',');) {
    const std::size_t at = part.find('@');
    if (at == std::string::npos || at == 0) throw bad(part, "is not TIME@dDEVICE or TIME@NODE+NODE...");
    HostSyncCall c;
    char* end = nullptr;
    const double ps = std::strtod(part.substr(0, at).c_str(), &end);
    if (*end != '\0' || !(ps >= 0 && ps < 1e18)) throw bad(part, "does not start with a host time in ps (below 10^18)");
    c.duration_ps = static_cast<uint64_t>(ps);
    const std::string what = part.substr(at + 1);
    if (!what.empty() && what[0] == 'd') {
      const double d = std::strtod(what.c_str() + 1, &end);
      if (what.size() < 2 || *end != '\0' || !(d >= 0 && d < kMaxDevices))
        throw bad(part, "names no device (0.." + std::to_string(kMaxDevices - 1) + ")");
      c.device = static_cast<int>(d);
    } else {
      std::istringstream ids(what);
      for (std::string id; std::getline(ids, id, '+');) {
        const double v = std::strtod(id.c_str(), &end);
        if (id.empty() || *end != '\0' || !(v >= 0) || !deps.count(static_cast<uint64_t>(v)))
          throw bad(part, "waits for '" + id + "', not a node this one depends on");
        c.nodes.push_back(static_cast<uint64_t>(v));
      }
      if (c.nodes.empty()) throw bad(part, "waits for nothing");
    }
    calls.push_back(std::move(c));
  }
  return calls;
}

void recordedEnvironment(const chakra::GlobalMetadata& meta, trace::Header* h) {
  static const std::string kPrefix = "cardsim_env:";
  for (const auto& a : meta.attr()) {
    if (a.name().compare(0, kPrefix.size(), kPrefix) != 0 || a.value_case() != chakra::AttributeProto::kStringVal)
      continue;
    const std::string key = a.name().substr(kPrefix.size());
    for (const char* k : trace::kReplayedEnvironment)
      if (key == k) (*h->mutable_environment())[key] = a.string_val();
  }
}

}  // namespace cardsim::replay
