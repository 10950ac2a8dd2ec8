// The collective fabric of a running simulation: the preset's fabric parameters, the
// topology for as many nodes as a job's ranks need, and the time of a collective alone on
// it. Ranks are placed on the topology's devices in order (global rank r on device r), as
// a job of one device per rank is. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <string>
#include <vector>

#include "device_models/fabric/Algorithms.h"
#include "device_models/fabric/FabricParams.h"

namespace cardsim::sim {

class FabricModel {
 public:
  static constexpr double kMaxCollectiveBytes = 281474976710656.0;   // 2^48
  // The most ranks a job on the model may have: its routes between every pair of nodes take
  // memory as the square of them (32,768 ranks exhaust 24 GB).
  static constexpr long long kMaxRanks = 16384;
  static constexpr std::size_t kMaxRememberedChoices = 4096;
  explicit FabricModel(fabric::FabricParams params) : params_(std::move(params)) {}
  const fabric::FabricParams& params() const { return params_; }

  struct Timed {
    double seconds = 0;
    std::string algorithm;
    bool tuned = false;   // the tuner's choice (none named, or a preference it could not run)
  };
  // What a collective puts on one link ("dev0->sw0"): bytes, and the link's bandwidth (one
  // direction), so that bytes / bandwidth is the time the link is busy with them.
  struct LinkUse {
    double bytes = 0;
    double bandwidth_bytes_per_s = 0;
  };
  using LinkLoads = std::map<std::string, LinkUse>;
  // `ranks`: the group's global ranks, in group order; `root`/`peer` index into them;
  // `algorithm` empty: the tuner's choice; named: that algorithm, or with `preferred` (a
  // CARDSIM_COLL_ALGO-style preference) the tuner's choice where it cannot run this one.
  // With `loads`, adds the bytes the collective's schedule moves over each link.
  // `pair_bytes`: an uneven all_to_all's sizes (fabric::CollectiveRequest::pair_bytes).
  // Throws std::invalid_argument naming what is wrong.
  Timed time(fabric::CollectiveOp op, double bytes, const std::vector<int>& ranks, uint32_t root,
             uint32_t peer, const std::string& algorithm, LinkLoads* loads = nullptr, bool preferred = false,
             const std::vector<double>* pair_bytes = nullptr);

  // A peer copy of `bytes` from device `src` to device `dst` alone on the fabric: the route's
  // latency, then the bytes at the slowest of its links' copy rates (LinkParams::
  // copyBandwidth, as the cards' FabricLinks move them). Throws as time().
  double copySeconds(int src, int dst, double bytes);
  struct Request {
    fabric::CollectiveOp op = fabric::CollectiveOp::AllReduce;
    double bytes = 0;
    std::vector<int> ranks;
    uint32_t root = 0, peer = 0;
    std::string algorithm;
    std::vector<double> pair_bytes;   // an uneven all_to_all's sizes; empty: even
    double release_s = 0;   // when it starts, on a clock shared by all the requests
  };
  // Collectives that overlap in time, sharing the fabric's links: each one's seconds from
  // its release to its end (each takes the algorithm it would take alone). Throws as time().
  std::vector<double> timeTogether(const std::vector<Request>& requests);

 private:
  const fabric::Topology& topologyFor(uint32_t devices);
  struct Plan {
    std::string algorithm;   // "none": a group of one, or a send to itself
    bool tuned = false;
    fabric::Schedule schedule;
  };
  // Checks the request and lays out its schedule on `t` (caller holds mutex_).
  Plan plan(fabric::CollectiveOp op, double bytes, const std::vector<int>& ranks, uint32_t root, uint32_t peer,
            const std::string& algorithm, const fabric::Topology& t, bool preferred = false,
            const std::vector<double>* pair_bytes = nullptr);
  static int highestRank(const std::vector<int>& ranks);
  fabric::FabricParams params_;
  std::mutex mutex_;
  std::map<uint32_t, std::unique_ptr<fabric::Topology>> topologies_;   // by node count
  // The default choice per request (it times every algorithm's schedule: a training step
  // repeats the same few collectives, each rank and the server asking for each of them).
  struct ChoiceKey {
    const fabric::Topology* topology;
    fabric::CollectiveOp op;
    double bytes;
    uint32_t root, peer;
    std::vector<fabric::NodeId> ranks;
    bool operator<(const ChoiceKey& o) const {
      return std::tie(topology, op, bytes, root, peer, ranks) < std::tie(o.topology, o.op, o.bytes, o.root, o.peer, o.ranks);
    }
  };
  std::map<ChoiceKey, const fabric::ICollectiveAlgorithm*> choices_;
  // time()'s answers (a pure function of its arguments on a topology): a job, or a replay
  // standing for 1024 ranks, repeats the same few collectives, each solved once. Bounded
  // like choices_; the links' loads kept once asked for.
  static constexpr std::size_t kMaxRememberedTimes = 256;
  struct TimeKey {
    const fabric::Topology* topology;
    fabric::CollectiveOp op;
    double bytes;
    uint32_t root, peer;
    bool preferred;
    std::string algorithm;
    std::vector<int> ranks;
    std::vector<double> pair_bytes;
    bool operator<(const TimeKey& o) const {
      return std::tie(topology, op, bytes, root, peer, preferred, algorithm, ranks, pair_bytes) <
             std::tie(o.topology, o.op, o.bytes, o.root, o.peer, o.preferred, o.algorithm, o.ranks, o.pair_bytes);
    }
  };
  struct TimeMemo {
    Timed timed;
    bool has_loads = false;
    LinkLoads loads;
  };
  std::map<TimeKey, TimeMemo> timed_;
  // chooseAlgorithm's answer for `r` on `t`, from choices_ when asked before (caller holds mutex_).
  const fabric::ICollectiveAlgorithm& rememberedChoice(const fabric::CollectiveRequest& r, const fabric::Topology& t);
};

}  // namespace cardsim::sim
