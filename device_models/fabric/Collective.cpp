#include "device_models/fabric/Collective.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <unordered_map>

namespace cardsim::fabric {

namespace {
struct OpName {
  CollectiveOp op;
  const char* name;
};
constexpr OpName kOps[] = {
    {CollectiveOp::AllReduce, "all_reduce"},         {CollectiveOp::AllGather, "all_gather"},
    {CollectiveOp::ReduceScatter, "reduce_scatter"}, {CollectiveOp::Broadcast, "broadcast"},
    {CollectiveOp::Reduce, "reduce"},                {CollectiveOp::AllToAll, "all_to_all"},
    {CollectiveOp::SendRecv, "send_recv"},           {CollectiveOp::Barrier, "barrier"},
};
// Names compare without case, '_', '-' or '/' ("send/recv" as the libraries write it).
std::string squash(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != '_' && c != '-' && c != '/') out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return out;
}
}  // namespace

const char* opName(CollectiveOp op) {
  for (const OpName& o : kOps)
    if (o.op == op) return o.name;
  return "?";
}

CollectiveOp parseOp(const std::string& name) {
  for (const OpName& o : kOps)
    if (squash(name) == squash(o.name)) return o.op;
  std::string valid;
  for (const OpName& o : kOps) valid += std::string(valid.empty() ? "" : ", ") + o.name;
  throw std::invalid_argument("unknown collective '" + name + "' (valid: " + valid + ")");
}

std::string pairBytesProblem(CollectiveOp op, const std::vector<double>& pair_bytes, size_t ranks) {
  if (pair_bytes.empty()) return {};
  if (op != CollectiveOp::AllToAll)
    return std::string("per-pair sizes are for all_to_all, not ") + opName(op);
  if (pair_bytes.size() != ranks * ranks)
    return "all_to_all over " + std::to_string(ranks) + " ranks needs " + std::to_string(ranks * ranks) +
           " per-pair sizes (ranks x ranks), got " + std::to_string(pair_bytes.size());
  for (size_t i = 0; i < pair_bytes.size(); ++i)
    if (!(pair_bytes[i] >= 0) || !std::isfinite(pair_bytes[i]))
      return "all_to_all: rank " + std::to_string(i / ranks) + "'s size for rank " + std::to_string(i % ranks) +
             " is not a non-negative number of bytes (" + std::to_string(pair_bytes[i]) + ")";
  return {};
}

double busBandwidthFactor(CollectiveOp op, uint32_t ranks) {
  const double n = ranks;
  switch (op) {
    case CollectiveOp::AllReduce: return n > 1 ? 2 * (n - 1) / n : 0;
    case CollectiveOp::AllGather:
    case CollectiveOp::ReduceScatter:
    case CollectiveOp::AllToAll: return n > 1 ? (n - 1) / n : 0;
    default: return 1;
  }
}

double memoryBytesPerMember(CollectiveOp op, double bytes, uint32_t ranks) {
  if (ranks < 2 || !(bytes > 0)) return 0;
  const double part = (ranks - 1.0) / ranks;
  switch (op) {
    case CollectiveOp::AllReduce: return 5 * part * bytes;
    case CollectiveOp::ReduceScatter: return 3 * part * bytes;
    case CollectiveOp::AllGather:
    case CollectiveOp::AllToAll: return 2 * part * bytes;
    case CollectiveOp::Reduce: return 2 * bytes;
    case CollectiveOp::Broadcast:
    case CollectiveOp::SendRecv: return bytes;
    case CollectiveOp::Barrier: return 0;
  }
  return 0;
}

uint32_t chunkCount(double bytes, double chunk_bytes) {
  if (!(chunk_bytes > 0) || bytes <= chunk_bytes) return 1;
  return static_cast<uint32_t>(std::ceil(bytes / chunk_bytes));
}

void pipelineRing(Phase& p, uint32_t steps, double chunk_bytes, const Topology& t, uint32_t cycle) {
  if (steps == 0 || p.transfers.empty() || cycle == 0) {
    p.repeat = 0;
    return;
  }
  double piece = 0;
  for (const Transfer& x : p.transfers) piece = std::max(piece, x.bytes);
  const uint32_t chunks = chunkCount(piece, chunk_bytes);
  for (Transfer& x : p.transfers) x.bytes /= chunks;
  p.repeat = steps * chunks;
  p.pipeline_depth = steps;
  // Not pipelined (no chunk size): the textbook ring, every rank sending its whole piece
  // at each step at once, s steps and no fill.
  if (!(chunk_bytes > 0)) return;
  // Each transfer's chunk time at its route's share of its slowest link.
  std::unordered_map<uint32_t, uint32_t> crossing;   // link -> transfers crossing it
  for (const Transfer& x : p.transfers)
    for (LinkId l : t.route(x.src, x.dst)) ++crossing[index(l)];
  std::vector<double> tau(p.transfers.size(), 0);
  double slowest = 0;
  for (std::size_t i = 0; i < p.transfers.size(); ++i) {
    const Transfer& x = p.transfers[i];
    double share = std::numeric_limits<double>::infinity();
    for (LinkId l : t.route(x.src, x.dst))
      share = std::min(share, t.link(l).params.bandwidth_bytes_per_s / crossing[index(l)]);
    tau[i] = share > 0 && std::isfinite(share) ? x.bytes / share : 0;
    slowest = std::max(slowest, tau[i]);
  }
  // Per ring: its hops in ring order, then the slowest window of `steps` consecutive hops
  // (around the ring as often as it takes), by prefix sums over the ring twice.
  double way = 0;
  for (std::size_t at = 0; at + cycle <= p.transfers.size(); at += cycle) {
    std::unordered_map<uint32_t, std::size_t> from;   // source -> transfer index in this ring
    for (std::size_t i = at; i < at + cycle; ++i) from[index(p.transfers[i].src)] = i;
    std::vector<double> hop;
    hop.reserve(cycle);
    std::size_t i = at;
    for (uint32_t k = 0; k < cycle; ++k) {
      hop.push_back(tau[i]);
      const auto next = from.find(index(p.transfers[i].dst));
      if (next == from.end()) break;   // not a ring: no fill beyond the repeats
      i = next->second;
    }
    if (hop.size() != cycle) continue;
    double round = 0;
    for (double h : hop) round += h;
    const uint32_t laps = steps / cycle, rest = steps % cycle;
    std::vector<double> prefix(2 * cycle + 1, 0);
    for (uint32_t k = 0; k < 2 * cycle; ++k) prefix[k + 1] = prefix[k] + hop[k % cycle];
    for (uint32_t s = 0; s < cycle; ++s) way = std::max(way, laps * round + prefix[s + rest] - prefix[s]);
  }
  p.fill_repeats = slowest > 0 ? std::max(0.0, way - slowest) / slowest : 0.0;
}

}  // namespace cardsim::fabric
