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

std::vector<HostMarkerWait> markerWaits(const chakra::Node& n, double duration_ps,
                                        const std::function<bool(uint64_t)>& has_node, const std::string& where) {
  std::vector<HostMarkerWait> waits;
  const std::string all = text(n, "cardsim_marker_waits");
  if (all.empty()) return waits;
  auto bad = [&](const std::string& part, const std::string& why) {
    return TraceError(where + ": cardsim_marker_waits '" + all + "': '" + part + "' " + why);
  };
  // A whole non-negative number below `limit`, or -1.
  auto whole = [](const std::string& t, double limit) -> double {
    char* end = nullptr;
    const double v = std::strtod(t.c_str(), &end);
    if (t.empty() || *end != '\0' || !(v >= 0 && v < limit) || v != static_cast<double>(static_cast<uint64_t>(v)))
      return -1;
    return v;
  };
  double total = 0;
  std::istringstream in(all);
  for (std::string part; std::getline(in, part, ',');) {
    const std::size_t at = part.find('@'), colon = part.find(':', at == std::string::npos ? 0 : at);
    if (at == std::string::npos || at == 0 || colon == std::string::npos)
      throw bad(part, "is not TIME@DEVICE:STREAM or TIME@DEVICE:STREAM>NODE");
    const std::size_t gt = part.find('>', colon);
    HostMarkerWait m;
    const double ps = whole(part.substr(0, at), 1e18);
    if (ps < 0) throw bad(part, "does not start with a host time in ps (below 10^18)");
    const double device = whole(part.substr(at + 1, colon - at - 1), kMaxDevices);
    if (device < 0) throw bad(part, "names no device (0.." + std::to_string(kMaxDevices - 1) + ")");
    const double stream = whole(part.substr(colon + 1, gt == std::string::npos ? std::string::npos : gt - colon - 1),
                                4294967296.0);
    if (stream < 0) throw bad(part, "names no stream (an id from 0 to 2^32-1)");
    if (gt != std::string::npos) {
      const double node = whole(part.substr(gt + 1), 1e19);
      if (node < 0 || !has_node(static_cast<uint64_t>(node)))
        throw bad(part, "waits for '" + part.substr(gt + 1) + "', not a node of this file");
      m.node = static_cast<int64_t>(node);
    }
    m.duration_ps = static_cast<uint64_t>(ps);
    m.device = static_cast<int>(device);
    m.stream = static_cast<int64_t>(stream);
    total += ps;
    waits.push_back(m);
  }
  if (total > duration_ps)
    throw TraceError(where + ": cardsim_marker_waits '" + all + "' take " + std::to_string(total * 1e-6) +
                     " us, more than the node's " + std::to_string(duration_ps * 1e-6) + " us");
  return waits;
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
