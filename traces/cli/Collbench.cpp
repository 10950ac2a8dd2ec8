// cardsim collbench: an nccl-tests-style sweep of one collective over message sizes on a
// preset's fabric, either live (--ranks N processes through cncl/bccl, event-timed; see
// LiveCollbench.h) or through the fabric model alone (--model-only: the collective alone on
// an idle fabric). Both give the same times. Sizes double from --min-bytes to --max-bytes
// (or grow by --factor); algbw = bytes / time and busbw = algbw x nccl-tests' bus factor
// (GB = 1e9 bytes).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "device_models/fabric/Algorithms.h"
#include "device_models/fabric/CollectiveEngine.h"
#include "simulator/Config.h"
#include "simulator/FabricConfig.h"
#include "simulator/FabricModel.h"
#include "traces/cli/Args.h"
#include "traces/cli/Commands.h"
#include "traces/cli/LiveCollbench.h"

namespace cardsim::cli {

namespace {

std::string fmtBytes(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f", bytes);
  return b;
}

// The most rows one sweep prints (a factor near 1 over a wide range would run for hours).
constexpr std::size_t kMaxSizes = 4096;
const std::vector<FlagSpec> kFlags = {
    {"preset", true, false, "device preset (default mlu370-x8)"},
    {"ranks", true, false, "ranks, one device each, on devices 0..N-1 (default 8)"},
    {"op", true, false, "all_reduce (default), all_gather, reduce_scatter, broadcast, reduce, all_to_all, send_recv, barrier"},
    {"algo", true, false, "ring, tree, direct, hierarchical, switch (default: CARDSIM_COLL_ALGO, else the rule)"},
    {"min-bytes", true, false, "smallest size, K/M/G suffixes (default 1K)"},
    {"max-bytes", true, false, "largest size (default 1G)"},
    {"factor", true, false, "size multiplier between rows (default 2)"},
    {"nodes", true, false, "nodes of the preset's node shape (default: enough for --ranks)"},
    {"set", true, true, "key.path=value override of the preset"},
    {"csv", false, false, "print CSV: op,algo,ranks,bytes,time_us,algbw_GBps,busbw_GBps"},
    {"model-only", false, false, "time through the fabric model alone (no processes)"},
    {"iters", true, false, "live: timed iterations per size (default 5)"},
    {"warmup", true, false, "live: untimed iterations before them (default 1)"},
    {"execution", true, false, "live: timing (default; no bytes move, same times) or full (bytes move through Gloo and each result is checked)"},
    {"help", false, false, "this help"},
};
}  // namespace

int runCollbench(const std::vector<std::string>& argv) {
  Args a("collbench", kFlags, argv);
  if (a.has("help")) {
    std::fputs(Args::usage("collbench", kFlags).c_str(), stdout);
    return 0;
  }
  if (!a.positional().empty()) throw UsageError("cardsim collbench: unexpected argument '" + a.positional()[0] + "'");
  const bool live = !a.has("model-only");
  for (const char* f : {"iters", "warmup", "execution"})
    if (!live && a.has(f)) throw UsageError(std::string("cardsim collbench: --") + f + " applies to live runs, not --model-only");
  const long long ranks = a.integer("ranks", 8);
  if (ranks < 1) throw UsageError("cardsim collbench: --ranks must be at least 1, got " + std::to_string(ranks));
  if (ranks > sim::FabricModel::kMaxRanks)
    throw UsageError("cardsim collbench: --ranks " + std::to_string(ranks) + " is over the limit of " +
                     std::to_string(sim::FabricModel::kMaxRanks) + " (the fabric model's routes grow as the square of the ranks)");
  const double lo = a.size("min-bytes", 1024), hi = a.size("max-bytes", 1024.0 * 1024 * 1024);
  const double factor = a.number("factor", 2);
  if (!(lo > 0) || hi < lo)
    throw UsageError("cardsim collbench: need 0 < --min-bytes <= --max-bytes, got --min-bytes " +
                     a.get("min-bytes", "1K") + " (" + fmtBytes(lo) + " bytes) and --max-bytes " + a.get("max-bytes", "1G") +
                     " (" + fmtBytes(hi) + " bytes)");
  if (hi > sim::FabricModel::kMaxCollectiveBytes)
    throw UsageError("cardsim collbench: --max-bytes " + a.get("max-bytes") + " is over the model's limit of 256T");
  if (!(factor > 1)) throw UsageError("cardsim collbench: --factor must be above 1, got " + a.get("factor"));
  const fabric::CollectiveOp op = fabric::parseOp(a.get("op", "all_reduce"));
  if (op == fabric::CollectiveOp::SendRecv && ranks < 2)
    throw UsageError("cardsim collbench: send_recv needs --ranks 2 or more");
  const char* env_algo = std::getenv("CARDSIM_COLL_ALGO");
  std::string algo = a.get("algo", env_algo ? env_algo : "");
  if (!algo.empty()) {   // unknown names fail before any work, naming where they came from
    try {
      fabric::algorithm(algo);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("cardsim collbench: ") + (a.has("algo") ? "--algo" : "CARDSIM_COLL_ALGO") + ": " +
                       e.what());
    }
  }
  // --algo is run or refused; CARDSIM_COLL_ALGO, else fabric.algorithm, is a preference, as
  // in a job (the shim's rule).
  const bool preferred = !a.has("algo");
  const auto pick = [&](const fabric::CollectiveRequest& req, const fabric::Topology& t)
      -> const fabric::ICollectiveAlgorithm& {
    return preferred ? fabric::preferAlgorithm(algo, req, t) : fabric::pickAlgorithm(algo, req, t);
  };

  sim::SimOptions o;
  o.preset = a.get("preset", "mlu370-x8");
  o.overrides = a.all("set");
  if (const char* file = std::getenv("CARDSIM_CONFIG"); file && *file) o.overrides_file = file;
  // The whole configuration is checked, not only the fabric's part: a bad --set of another
  // block is refused here as it would be in a job (the model-only sweep does not use it).
  (void)sim::loadDeviceParams(o);
  fabric::FabricParams fp = sim::loadFabricParams(o);
  if (algo.empty()) algo = fp.algorithm;
  // Default: the preset's (or CARDSIM_NODES') node count, or as many as the ranks need.
  if (!a.has("nodes") && fp.nodes_set && static_cast<long long>(fp.nodes) * fp.devices_per_node < ranks)
    throw UsageError("cardsim collbench: " + std::to_string(fp.nodes) + " node(s) of " +
                     std::to_string(fp.devices_per_node) + " devices (CARDSIM_NODES or fabric.nodes) cannot hold " +
                     std::to_string(ranks) + " ranks; set more nodes, or leave the count unset to fit the ranks");
  const long long nodes = a.integer("nodes", fabric::nodesFor(fp, static_cast<uint64_t>(ranks)));
  if (nodes > sim::kMaxNodes)
    throw UsageError("cardsim collbench: --nodes " + std::to_string(nodes) + " is more than " +
                     std::to_string(sim::kMaxNodes) + " nodes");
  if (nodes < 1 || nodes * fp.devices_per_node < ranks)
    throw UsageError("cardsim collbench: " + std::to_string(nodes) + " node(s) of " +
                     std::to_string(fp.devices_per_node) + " devices cannot hold " + std::to_string(ranks) + " ranks");
  fp.nodes = static_cast<uint32_t>(nodes);   // the header's count
  fabric::FabricParams built = fp;
  built.nodes = fabric::nodesToBuild(fp, static_cast<uint64_t>(ranks));
  const fabric::Topology topo = fabric::buildTopology(built);
  fabric::CollectiveEngine engine(topo);

  fabric::CollectiveRequest r = fabric::requestFor(fp);
  r.op = op;
  r.ranks.assign(topo.devices().begin(), topo.devices().begin() + ranks);
  r.peer = ranks > 1 ? 1 : 0;
  // nccl-tests' buffer for the op, rounded down so that every rank's share is whole float32
  // elements (as the live run's buffers are).
  const auto moved = [&](double bytes) {
    double n = std::floor(bytes / 4);
    const bool shared = op == fabric::CollectiveOp::AllGather || op == fabric::CollectiveOp::ReduceScatter ||
                        op == fabric::CollectiveOp::AllToAll;
    if (shared) n -= std::fmod(n, static_cast<double>(ranks));
    return op == fabric::CollectiveOp::Barrier ? 4 * std::max(n, 1.0) : 4 * n;
  };
  // The sizes asked for, each at least a byte more than the last (a factor near 1 must not
  // repeat a size forever), one row per size as nccl-tests prints them: a size too small for
  // one element per rank is a row of 0 bytes, an empty collective that takes no time.
  std::vector<double> sizes;
  for (double bytes = lo; bytes <= hi * (1 + 1e-12); bytes = std::max(std::floor(bytes * factor), bytes + 1)) {
    if (sizes.size() == kMaxSizes)
      throw UsageError("cardsim collbench: --factor " + a.get("factor") + " from " + std::to_string(static_cast<uint64_t>(lo)) +
                       " to " + std::to_string(static_cast<uint64_t>(hi)) + " bytes makes more than " + std::to_string(kMaxSizes) +
                       " sizes; use a larger factor or a narrower range");
    sizes.push_back(bytes);
  }
  for (double bytes : sizes) {   // an algorithm the topology cannot run fails before any work
    r.bytes = moved(bytes);
    pick(r, topo);
  }
  // send_recv as nccl-tests' sendrecv: every rank sends to the next and receives from the
  // previous at once; point-to-point transfers are timed alone (as on the fabric server), so
  // the row's time is the slowest pair's.
  const auto timeOf = [&](const fabric::ICollectiveAlgorithm& alg) {
    if (ranks < 2) return 0.0;
    if (op != fabric::CollectiveOp::SendRecv) return engine.timeAlone(alg.schedule(r, topo));
    double worst = 0;
    fabric::CollectiveRequest pair = r;
    for (long long i = 0; i < ranks; ++i) {
      pair.ranks = {topo.devices()[i], topo.devices()[(i + 1) % ranks]};
      pair.root = 0;
      pair.peer = 1;
      worst = std::max(worst, engine.timeAlone(pick(pair, topo).schedule(pair, topo)));
    }
    return worst;
  };

  std::vector<LiveRow> measured;
  if (live) {
    LiveJob job;
    job.preset = o.preset;
    job.ranks = ranks;
    job.nodes = nodes;
    job.op = fabric::opName(op);
    job.algo = algo;
    job.overrides = o.overrides;
    job.sizes = sizes;
    job.iters = a.integer("iters", 5);
    job.warmup = a.integer("warmup", 1);
    job.execution = a.get("execution", "timing");
    if (job.iters < 1) throw UsageError("cardsim collbench: --iters must be at least 1, got " + std::to_string(job.iters));
    if (job.warmup < 0) throw UsageError("cardsim collbench: --warmup must be at least 0, got " + std::to_string(job.warmup));
    if (job.execution != "timing" && job.execution != "full")
      throw UsageError("cardsim collbench: --execution must be timing or full, got '" + job.execution + "'");
    measured = runLiveCollbench(job);
  }

  const bool csv = a.has("csv");
  if (csv) {
    std::printf("op,algo,ranks,bytes,time_us,algbw_GBps,busbw_GBps\n");
  } else {
    const std::string how = live ? "live, " + std::to_string(ranks) + " process(es) through " +
                                       (o.preset.rfind("br", 0) == 0 ? "bccl" : "cncl")
                                 : std::string("model only");
    std::printf("# cardsim collbench: %s on %lld rank(s) of %s, %u node(s) x %u devices (%s), %s\n",
                fabric::opName(op), ranks, o.preset.c_str(), fp.nodes, fp.devices_per_node,
                fabric::shapeName(fp.shape), how.c_str());
    std::printf("# %12s %12s %8s %13s %12s %12s %12s\n", "size", "count", "type", "algo", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)");
  }
  const double bus = fabric::busBandwidthFactor(op, static_cast<uint32_t>(ranks));
  // nccl-tests' count column: elements per rank's buffer (all_gather's input, reduce_scatter's
  // output, all_to_all's share per peer being a rank's part of the size).
  const bool per_rank = op == fabric::CollectiveOp::AllGather || op == fabric::CollectiveOp::ReduceScatter ||
                        op == fabric::CollectiveOp::AllToAll;
  const auto count = [&](double bytes) {
    return std::floor(bytes / 4) / (per_rank ? static_cast<double>(ranks) : 1.0);
  };
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double bytes = live ? measured[i].bytes : moved(sizes[i]);
    r.bytes = bytes;
    const fabric::ICollectiveAlgorithm& alg = pick(r, topo);
    const double t = live ? measured[i].time_us * 1e-6 : bytes > 0 ? timeOf(alg) : 0.0;
    // A barrier moves no data: no bandwidth to speak of, whatever the row's size.
    const double algbw = t > 0 && op != fabric::CollectiveOp::Barrier ? bytes / t / 1e9 : 0.0;
    if (csv)
      std::printf("%s,%s,%lld,%.0f,%.3f,%.3f,%.3f\n", fabric::opName(op), alg.name(), ranks, bytes, t * 1e6,
                  algbw, algbw * bus);
    else
      std::printf("  %12.0f %12.0f %8s %13s %12.2f %12.2f %12.2f\n", bytes, count(bytes), "float", alg.name(),
                  t * 1e6, algbw, algbw * bus);
  }
  return 0;
}

}  // namespace cardsim::cli
