#include "simulator/FabricModel.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "device_models/fabric/CollectiveEngine.h"

namespace cardsim::sim {

const fabric::Topology& FabricModel::topologyFor(uint32_t devices) {
  const uint32_t per = params_.devices_per_node;
  const uint32_t nodes = std::max(params_.nodes, (devices + per - 1) / per);
  auto& slot = topologies_[nodes];
  if (!slot) {
    fabric::FabricParams p = params_;
    p.nodes = nodes;
    slot = std::make_unique<fabric::Topology>(fabric::buildTopology(p));
  }
  return *slot;
}

FabricModel::Timed FabricModel::time(fabric::CollectiveOp op, double bytes, const std::vector<int>& ranks,
                                     uint32_t root, uint32_t peer, const std::string& algorithm,
                                     LinkLoads* loads) {
  if (ranks.empty()) throw std::invalid_argument("a collective needs at least one rank");
  if (!(bytes >= 0)) throw std::invalid_argument("a collective's size must be a non-negative number of bytes");
  const bool p2p = op == fabric::CollectiveOp::SendRecv;
  if (root >= ranks.size() || (p2p && peer >= ranks.size()))
    throw std::invalid_argument(std::string(p2p && peer >= ranks.size() ? "peer" : "root") + " index " +
                                std::to_string(p2p && peer >= ranks.size() ? peer : root) + " is outside the group of " +
                                std::to_string(ranks.size()) + " rank(s)");
  int highest = 0;
  for (int r : ranks) {
    if (r < 0) throw std::invalid_argument("negative rank " + std::to_string(r) + " in a collective's group");
    highest = std::max(highest, r);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const fabric::Topology& t = topologyFor(static_cast<uint32_t>(highest) + 1);
  fabric::CollectiveRequest r;
  r.op = op;
  r.bytes = bytes;
  for (int rank : ranks) r.ranks.push_back(t.devices().at(static_cast<size_t>(rank)));
  r.root = root;
  r.peer = p2p ? peer : (ranks.size() > 1 ? 1 : 0);
  r.channels = params_.channels;
  r.chunk_bytes = params_.chunk_bytes;
  Timed out;
  if ((ranks.size() < 2 && !p2p) || (p2p && ranks[root] == ranks[peer])) {
    out.algorithm = "none";
    return out;   // a group of one moves nothing
  }
  std::string forced = algorithm;
  if (forced.empty())
    if (const char* env = std::getenv("CARDSIM_COLL_ALGO")) forced = env;
  const fabric::ICollectiveAlgorithm& a = fabric::pickAlgorithm(forced, r, t);
  out.algorithm = a.name();
  const fabric::Schedule schedule = a.schedule(r, t);
  out.seconds = fabric::CollectiveEngine(t).timeAlone(schedule);
  if (loads) {
    for (const fabric::Phase& ph : schedule.phases)
      for (const fabric::Transfer& x : ph.transfers)
        for (fabric::LinkId l : t.route(x.src, x.dst)) {
          const fabric::Link& link = t.link(l);
          LinkUse& u = (*loads)[link.name];
          u.bytes += x.bytes * ph.repeat;
          u.bandwidth_bytes_per_s = link.params.bandwidth_bytes_per_s;
        }
  }
  return out;
}

}  // namespace cardsim::sim
