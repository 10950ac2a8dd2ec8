#include "traces/cli/LinkLoads.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "device_models/fabric/Collective.h"
#include "simulator/Config.h"
#include "simulator/FabricConfig.h"
#include "simulator/FabricModel.h"
#include "simulator/proto/config.pb.h"

namespace cardsim::cli {

timeline::PerfettoWriter::LinkLoads fabricLinkLoads(const timeline::RunTimeline& run, std::string* why) {
  timeline::PerfettoWriter::LinkLoads out;
  const auto& commands = run.commands();
  const auto& calls = run.calls();
  const trace::Header& h0 = run.ranks().front().header;

  // The recording's resolved configuration, with the node count it ran with.
  fabric::FabricParams params;
  try {
    const std::string origin = "the configuration recorded in " + run.ranks().front().file;
    const config::Preset preset = sim::parsePresetText(h0.config_text(), origin);
    if (!preset.device().has_fabric()) throw sim::ConfigError("no fabric block");
    params = sim::toFabricParams(preset.device().fabric(), origin);
    if (auto it = h0.environment().find("CARDSIM_NODES"); it != h0.environment().end())
      params.nodes = static_cast<uint32_t>(std::max(1L, std::strtol(it->second.c_str(), nullptr, 10)));
  } catch (const std::exception& e) {
    *why = std::string("the recorded configuration has no fabric (") + e.what() + ")";
    return out;
  }
  sim::FabricModel model(params);

  // Each collective once (its members on other ranks are the same transfers).
  std::set<std::pair<std::string, uint64_t>> seen;
  for (const timeline::RunTimeline::Command& c : commands) {
    if (c.command.kind() != trace::DeviceCommand::COLLECTIVE || c.call == timeline::RunTimeline::kNone) continue;
    const trace::Collective& coll = calls[c.call].record.collective();
    if (coll.pretimed() || !seen.insert({c.group, c.group_seq}).second) continue;
    sim::FabricModel::LinkLoads loads;
    sim::FabricModel::Timed t;
    try {
      const std::vector<int> ranks(coll.ranks().begin(), coll.ranks().end());
      t = model.time(fabric::parseOp(coll.op()), coll.bytes(), ranks, static_cast<uint32_t>(coll.root()),
                     static_cast<uint32_t>(coll.peer()), coll.algorithm_used(), &loads);
    } catch (const std::exception&) {
      continue;   // an op or group the model does not take: no load to show
    }
    const uint64_t end = c.command.end_ps();
    const uint64_t span = static_cast<uint64_t>((coll.seconds() > 0 ? coll.seconds() : t.seconds) * 1e12 + 0.5);
    const uint64_t begin = end > span ? end - span : 0;
    if (end <= begin) continue;
    const double seconds = static_cast<double>(end - begin) * 1e-12;
    for (const auto& [name, u] : loads) {
      if (u.bandwidth_bytes_per_s <= 0 || u.bytes <= 0) continue;
      out[name].push_back({begin, end, u.bytes / u.bandwidth_bytes_per_s / seconds});
    }
  }
  if (out.empty()) *why = "no collective of the recording moved bytes over the fabric";
  return out;
}

sim::FabricModel::LinkLoads retimedLinkLoads(const std::vector<replay::CollectiveCall>& collectives,
                                             const fabric::FabricParams& params) {
  sim::FabricModel model(params);
  sim::FabricModel::LinkLoads total;
  for (const replay::CollectiveCall& c : collectives) {
    try {
      (void)model.time(fabric::parseOp(c.op), c.bytes, c.ranks, c.root, c.peer, c.algorithm, &total);
    } catch (const std::exception&) {
      continue;   // an op or group the model does not take: no load to add
    }
  }
  return total;
}

}  // namespace cardsim::cli
