// What host threads ask of a card: plain data, no SystemC. A Command is queued on one
// hardware queue of one device and runs in queue order.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device_models/DeviceParams.h"

namespace cardsim::model {

// Simulated time in picoseconds (SystemC's default resolution).
using TimePs = uint64_t;

inline TimePs secondsToPs(double s) { return static_cast<TimePs>(s * 1e12 + 0.5); }
inline double psToSeconds(TimePs t) { return static_cast<double>(t) * 1e-12; }

enum class DeviceId : uint32_t {};
enum class QueueId : uint32_t {};   // hardware queue within one device

inline uint32_t index(DeviceId d) { return static_cast<uint32_t>(d); }
inline uint32_t index(QueueId q) { return static_cast<uint32_t>(q); }

// A point in one hardware queue: "after command `seq` of (device, queue)". seq counts from 1.
struct QueuePoint {
  DeviceId device{};
  QueueId queue{};
  uint64_t seq = 0;
};

// What the model needs to time a kernel: work and traffic, not the computation itself.
struct KernelCost {
  KernelClass kernel_class = KernelClass::Other;
  DType dtype = DType::FP32;
  double flops = 0;          // operations (FLOPs or integer ops)
  double bytes_read = 0;
  double bytes_written = 0;
  uint32_t tiles = 0;        // 0: derived from the traffic and work
};

enum class CopyKind : uint8_t { HostToDevice, DeviceToHost, DeviceToDevice, PeerToPeer, Memset };
const char* copyKindName(CopyKind k);

// Collective: a communication step whose time the fabric model gives (its duration, or its
// end across ranks); it holds its queue and loads the card's memory with the bytes it reads
// and writes there, without being slowed by it (the fabric's time stands).
enum class CommandKind : uint8_t { Kernel, Copy, EventRecord, EventWait, Collective };
const char* commandKindName(CommandKind k);

// Written by the simulation thread when an event's record point completes.
struct EventSlot {
  std::atomic<bool> done{false};
  std::atomic<TimePs> time_ps{0};
};

// A collective's end as the fabric server answered it, which a later answer can still move
// later (a Revise: a collective answered after it shares its links) until the simulation
// is let past it (Simulator: a request that needs it seals it).
struct CollectiveEnd {
  std::atomic<TimePs> end_ps{0};
};

struct Command {
  CommandKind kind = CommandKind::Kernel;
  uint64_t seq = 0;            // position in its hardware queue, from 1
  TimePs ready_ps = 0;         // host time the command reached the device
  TimePs submitted_ps = 0;     // the host's clock when it was submitted: ready_ps before the
                               // intake moved it to the simulation's now (activity records
                               // tie a command to its host call by this)
  int priority_rank = 0;       // smaller runs first when clusters are contended
  uint32_t stream_tag = 0;     // the runtime's stream id, for timelines
  uint32_t name_id = 0;        // interned name, for timelines
  uint64_t correlation = 0;    // a profiler's id of the host call that submitted it (0: none)
  KernelCost kernel;
  CopyKind copy_kind = CopyKind::HostToDevice;
  uint64_t bytes = 0;
  DeviceId peer{};             // the other device of a peer copy
  bool peer_is_source = false; // peer copy into this device rather than out of it
  bool pageable = false;       // host side of the copy is not pinned
  bool in_graph = false;       // launched as part of a graph: lower dispatch cost
  std::shared_ptr<EventSlot> event;  // EventRecord
  QueuePoint wait_for;               // EventWait
  TimePs duration_ps = 0;            // Collective
  std::shared_ptr<CollectiveEnd> end;  // Collective: the fabric server's end across ranks, which may
                                       // move; none: start + duration_ps
  TimePs end_not_before_ps = 0;      // Collective without `end`: when its host is done issuing it
  double memory_bytes = 0;           // Collective: bytes it reads and writes in this card's memory
  // Collective: the bytes its schedule moves over each fabric link (by the link's name), of
  // which this command carries `link_share` (1/members when one process issues every member's
  // command, else 1): peer copies of this process on those links give way while it runs.
  std::vector<std::pair<std::string, double>> link_bytes;
  double link_share = 1;
};

// Receives every completed command, in the simulation thread.
class ICompletionSink {
 public:
  virtual ~ICompletionSink() = default;
  virtual void onComplete(DeviceId device, QueueId queue, const Command& cmd, TimePs start,
                          TimePs end) = 0;
};

}  // namespace cardsim::model
