// Collectives on the fabric: what is asked (op, bytes, the ranks' devices), and how an
// algorithm carries it out (a schedule of phases of transfers). One algorithm per file,
// each behind ICollectiveAlgorithm; the registry (AlgorithmRegistry.h) names them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device_models/fabric/Topology.h"

namespace cardsim::fabric {

enum class CollectiveOp : uint8_t {
  AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, SendRecv, Barrier
};
const char* opName(CollectiveOp op);
// Parses "all_reduce", "allreduce", "all-reduce", ...; throws listing the valid names.
CollectiveOp parseOp(const std::string& name);

struct CollectiveRequest {
  CollectiveOp op = CollectiveOp::AllReduce;
  // nccl-tests' size: the per-rank buffer (all_reduce, broadcast, reduce), the gathered
  // output (all_gather), the input (reduce_scatter), one rank's send buffer (all_to_all),
  // the message (send/recv).
  double bytes = 0;
  std::vector<NodeId> ranks;     // the group's devices, in rank order
  uint32_t root = 0;             // broadcast/reduce root, send/recv source (rank index)
  uint32_t peer = 1;             // send/recv destination (rank index)
  // all_to_all with uneven splits: bytes rank a sends rank b at [a * n + b] (n ranks; the
  // diagonal stays on the card). Empty: every rank sends bytes / n to each rank.
  std::vector<double> pair_bytes;
  uint32_t channels = 1;         // parallel rings/trees over different links where there are
  double chunk_bytes = 0;        // pipeline chunk per transfer; 0: one chunk per step
  // In-switch reduction's pipeline: rounds of switch_channels x ranks x switch_chunk_bytes
  // of the buffer (0: one round, streaming without a fill).
  double switch_chunk_bytes = 0;
  uint32_t switch_channels = 1;
  // The algorithms the tuner chooses among (the vendor library's); empty: every one.
  std::vector<std::string> library;
};

// One transfer between two fabric nodes (devices, or a reducing switch).
struct Transfer {
  NodeId src{}, dst{};
  double bytes = 0;
};

// Transfers that start together once the previous phase has finished; `repeat` runs the
// same pattern that many times back to back (the steps of a ring). A pipeline's repeats are
// its chunks: only the first `pipeline_depth` of them (its hops) wait out the route's
// latency, filling it; the chunks behind them stream on without it, as a library keeps
// several chunks in flight. 0: every repeat waits (a ring's steps depend on each other).
// `fill` of the repeats are the pipeline filling (its hops less one): they take their time,
// but the chunks they move are the others' (a link carries repeat - fill of them). A ring's
// pipeline, whose hops differ in speed (NICs and NVLinks in one ring), fills after its
// repeats instead, in `fill_repeats` times its last repeat's time: each chunk's way through
// its hops, each at its own speed (a repeat's time is its slowest hop's).
struct Phase {
  std::vector<Transfer> transfers;
  uint32_t repeat = 1;
  uint32_t pipeline_depth = 0;
  uint32_t fill = 0;
  double fill_repeats = 0;
};

struct Schedule {
  std::vector<Phase> phases;
};

class ICollectiveAlgorithm {
 public:
  virtual ~ICollectiveAlgorithm() = default;
  virtual const char* name() const = 0;
  // Empty when the algorithm can run `r` on `t`; otherwise why not.
  virtual std::string unsupported(const CollectiveRequest& r, const Topology& t) const = 0;
  virtual Schedule schedule(const CollectiveRequest& r, const Topology& t) const = 0;
};

// Empty when `pair_bytes` fits a collective `op` of `ranks` members (empty, or all_to_all's
// ranks x ranks finite non-negative sizes); otherwise what is wrong with it.
std::string pairBytesProblem(CollectiveOp op, const std::vector<double>& pair_bytes, size_t ranks);

// nccl-tests' bus-bandwidth factor: busbw = algbw * factor.
double busBandwidthFactor(CollectiveOp op, uint32_t ranks);

// Bytes one member of a collective of `ranks` members reads and writes in its own card's
// memory, whatever the algorithm (they move the same data per member in other orders):
// what it sends is read once, what it receives written once, and what it receives to
// reduce is combined with its own data (one more read). For `bytes` as in
// CollectiveRequest: all_reduce 5(n-1)/n, reduce_scatter 3(n-1)/n, all_gather and
// all_to_all 2(n-1)/n, reduce 2, broadcast and send/recv 1 times the bytes; barrier none.
double memoryBytesPerMember(CollectiveOp op, double bytes, uint32_t ranks);

// Pipeline chunks for `bytes` moved per step at `chunk_bytes` (at least one).
uint32_t chunkCount(double bytes, double chunk_bytes);

// A ring's `steps` as a pipeline of chunks, its transfers each one step's piece, in rings of
// `cycle` transfers each (consecutive in `p`, each sending to the next one's source): the
// piece goes in chunks of at most `chunk_bytes`, and each chunk is forwarded once it has
// arrived whole, so a chunk's steps follow one another as a chain's hops do. The phase
// repeats steps x chunks per piece times (the first `steps` waiting out the route's
// latency), and the pipeline fills in fill_repeats repeats' time: the slowest way of a chunk
// through `steps` consecutive hops of a ring, each hop's chunk at its link's share (the
// links' bandwidth over the transfers crossing them), less the one repeat of it the phase
// already counts, over the slowest hop's time: steps - 1 where every hop is alike. It is how a library's ring behaves
// (NCCL's measured mid-size times: README, Fidelity); the textbook ring, every rank sending
// at once, has no fill: chunk_bytes 0 (not pipelined) gives it, s steps of whole pieces.
void pipelineRing(Phase& p, uint32_t steps, double chunk_bytes, const Topology& t, uint32_t cycle);

}  // namespace cardsim::fabric
