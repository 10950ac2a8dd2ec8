#include "device_models/fabric/Collective.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

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
std::string squash(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != '_' && c != '-') out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
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

}  // namespace cardsim::fabric
