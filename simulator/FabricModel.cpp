#include "simulator/FabricModel.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "device_models/fabric/CollectiveEngine.h"

namespace cardsim::sim {

const fabric::Topology& FabricModel::topologyFor(uint32_t devices) {
  const uint32_t nodes = fabric::nodesToBuild(params_, devices);
  auto& slot = topologies_[nodes];
  if (!slot) {
    fabric::FabricParams p = params_;
    p.nodes = nodes;
    slot = std::make_unique<fabric::Topology>(fabric::buildTopology(p));
  }
  return *slot;
}

int FabricModel::highestRank(const std::vector<int>& ranks) {
  if (ranks.empty()) throw std::invalid_argument("a collective needs at least one rank");
  int highest = 0;
  for (int r : ranks) {
    if (r < 0) throw std::invalid_argument("negative rank " + std::to_string(r) + " in a collective's group");
    highest = std::max(highest, r);
  }
  return highest;
}

FabricModel::Plan FabricModel::plan(fabric::CollectiveOp op, double bytes, const std::vector<int>& ranks,
                                    uint32_t root, uint32_t peer, const std::string& algorithm,
                                    const fabric::Topology& t, bool preferred,
                                    const std::vector<double>* pair_bytes) {
  if (!(bytes >= 0)) throw std::invalid_argument("a collective's size must be a non-negative number of bytes");
  // Far beyond any card's memory; past it the times lose their meaning in double precision.
  if (bytes > kMaxCollectiveBytes)
    throw std::invalid_argument("a collective of " + std::to_string(bytes) + " bytes is over the model's limit of " +
                                std::to_string(kMaxCollectiveBytes) + " bytes (256 TiB)");
  const bool p2p = op == fabric::CollectiveOp::SendRecv;
  if (root >= ranks.size() || (p2p && peer >= ranks.size()))
    throw std::invalid_argument(std::string(p2p && peer >= ranks.size() ? "peer" : "root") + " index " +
                                std::to_string(p2p && peer >= ranks.size() ? peer : root) + " is outside the group of " +
                                std::to_string(ranks.size()) + " rank(s)");
  if (pair_bytes)
    if (const std::string why = fabric::pairBytesProblem(op, *pair_bytes, ranks.size()); !why.empty())
      throw std::invalid_argument(why);
  Plan out;
  if ((ranks.size() < 2 && !p2p) || (p2p && ranks[root] == ranks[peer])) {
    out.algorithm = "none";
    return out;   // a group of one moves nothing
  }
  fabric::CollectiveRequest r = fabric::requestFor(params_);
  r.op = op;
  r.bytes = bytes;
  for (int rank : ranks) r.ranks.push_back(t.devices().at(static_cast<size_t>(rank)));
  r.root = root;
  r.peer = p2p ? peer : (ranks.size() > 1 ? 1 : 0);
  if (pair_bytes) r.pair_bytes = *pair_bytes;
  const fabric::ICollectiveAlgorithm* a = nullptr;
  if (preferred)
    a = fabric::preferredIfRunnable(algorithm, r, t);   // null: left to the tuner
  else if (!algorithm.empty())
    a = &fabric::pickAlgorithm(algorithm, r, t);
  out.tuned = a == nullptr;
  if (!a) a = &rememberedChoice(r, t);
  out.algorithm = a->name();
  out.schedule = a->schedule(r, t);
  return out;
}

const fabric::ICollectiveAlgorithm& FabricModel::rememberedChoice(const fabric::CollectiveRequest& r,
                                                                  const fabric::Topology& t) {
  // Bounded: a sweep over sizes would otherwise keep every size's choice.
  if (choices_.size() >= kMaxRememberedChoices) choices_.clear();
  const fabric::ICollectiveAlgorithm*& slot = choices_[ChoiceKey{&t, r.op, r.bytes, r.root, r.peer, r.ranks}];
  if (!slot) slot = &fabric::chooseAlgorithm(r, t);
  return *slot;
}

FabricModel::Timed FabricModel::time(fabric::CollectiveOp op, double bytes, const std::vector<int>& ranks,
                                     uint32_t root, uint32_t peer, const std::string& algorithm,
                                     LinkLoads* loads, bool preferred, const std::vector<double>* pair_bytes) {
  const int highest = highestRank(ranks);
  std::lock_guard<std::mutex> lock(mutex_);
  const fabric::Topology& t = topologyFor(static_cast<uint32_t>(highest) + 1);
  TimeKey key{&t, op, bytes, root, peer, preferred, algorithm, ranks, pair_bytes ? *pair_bytes : std::vector<double>{}};
  auto hit = timed_.find(key);
  if (hit == timed_.end() || (loads && !hit->second.has_loads)) {
    const Plan p = plan(op, bytes, ranks, root, peer, algorithm, t, preferred, pair_bytes);   // throws: nothing kept
    TimeMemo m;
    m.timed.algorithm = p.algorithm;
    m.timed.tuned = p.tuned;
    m.timed.seconds = fabric::CollectiveEngine(t).timeAlone(p.schedule);
    if (loads) {
      m.has_loads = true;
      for (const fabric::Phase& ph : p.schedule.phases)
        for (const fabric::Transfer& x : ph.transfers)
          for (fabric::LinkId l : t.route(x.src, x.dst)) {
            const fabric::Link& link = t.link(l);
            LinkUse& u = m.loads[link.name];
            u.bytes += x.bytes * (ph.repeat - std::min(ph.fill, ph.repeat));
            u.bandwidth_bytes_per_s = link.params.bandwidth_bytes_per_s;
          }
    }
    if (timed_.size() >= kMaxRememberedTimes) timed_.clear();
    hit = timed_.insert_or_assign(std::move(key), std::move(m)).first;
  }
  if (loads)
    for (const auto& [name, use] : hit->second.loads) {
      LinkUse& u = (*loads)[name];
      u.bytes += use.bytes;
      u.bandwidth_bytes_per_s = use.bandwidth_bytes_per_s;
    }
  return hit->second.timed;
}

double FabricModel::copySeconds(int src, int dst, double bytes) {
  const int highest = highestRank({src, dst});
  if (!(bytes >= 0) || bytes > kMaxCollectiveBytes)
    throw std::invalid_argument("a copy of " + std::to_string(bytes) + " bytes is outside 0.." +
                                std::to_string(kMaxCollectiveBytes));
  std::lock_guard<std::mutex> lock(mutex_);
  const fabric::Topology& t = topologyFor(static_cast<uint32_t>(highest) + 1);
  const fabric::NodeId a = t.devices().at(static_cast<size_t>(src)), b = t.devices().at(static_cast<size_t>(dst));
  if (a == b) return 0;
  double rate = std::numeric_limits<double>::infinity();
  for (fabric::LinkId l : t.route(a, b)) rate = std::min(rate, t.link(l).params.copyBandwidth());
  return t.routeLatency(a, b) + bytes / rate;
}

std::vector<double> FabricModel::timeTogether(const std::vector<Request>& requests) {
  int highest = 0;
  for (const Request& q : requests) highest = std::max(highest, highestRank(q.ranks));
  std::lock_guard<std::mutex> lock(mutex_);
  const fabric::Topology& t = topologyFor(static_cast<uint32_t>(highest) + 1);
  std::vector<fabric::CollectiveEngine::Job> jobs;
  jobs.reserve(requests.size());
  for (const Request& q : requests)
    jobs.push_back({plan(q.op, q.bytes, q.ranks, q.root, q.peer, q.algorithm, t, false,
                         q.pair_bytes.empty() ? nullptr : &q.pair_bytes).schedule,
                    q.release_s});
  const std::vector<double> ends = fabric::CollectiveEngine(t).timeTogether(jobs);
  std::vector<double> out;
  out.reserve(ends.size());
  for (size_t i = 0; i < ends.size(); ++i) out.push_back(std::max(0.0, ends[i] - requests[i].release_s));
  return out;
}

}  // namespace cardsim::sim
