// cardsim driver shim: a vendor-runtime-shaped C++ API (devices, memory, copies, streams,
// events, kernel launch) over a backend chosen at run time: `sim`, the in-process
// SystemC model of the card, or `native`, the seam for a vendor runtime. Today `native`
// only looks for the vendor library (libcnrt.so / libsupa.so) and fails to initialize:
// no vendor call is bound yet.
//
// Plain C++17: no SystemC, no torch. Every call returns a Status that says what failed;
// nothing exits the process. Device pointers are host-addressable (the simulated
// device memory lives in this process), so a kernel's host callable reads and writes
// them directly.
//
// Time is simulated: each host thread has a virtual clock that runtime calls advance by
// their modelled cost; synchronizing moves it to the simulated completion time. A thread
// blocked on work it handed to another shares its clock for the hand-off
// (hostClockShareBegin/End).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cardsim::shim {

enum class Code : int {
  Success = 0,
  NotReady,         // queried work has not completed yet (not an error)
  InvalidValue,     // an argument is wrong: size, pointer, direction, flags
  InvalidDevice,    // device index out of range
  InvalidHandle,    // stream or event destroyed or never created
  OutOfMemory,      // simulated device capacity (or host address space) exhausted
  NotSupported,     // the backend or the card cannot do this
  InitFailed,       // the backend could not start (bad preset, config, runtime)
  KernelFailed,     // a kernel's host callable threw
  Internal,
  CommFailed,       // a collective failed across ranks: a member left, timed out or disagreed
  TimeOverflow,     // simulated time would pass its end (2^63 ps): a configuration far outside
                    // the card's range; the emulated cards of the process are unusable after it
};
const char* codeName(Code c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }

  bool ok() const { return code_ == Code::Success; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OutOfMemory: device 0 ..." or "Success".
  std::string toString() const;

 private:
  Code code_ = Code::Success;
  std::string message_;
};

// The last failed Status of this thread, cleared by reading (like cnrtGetLastError).
Status getLastError();

// ---- Backend and initialization -------------------------------------------------------

// Full: kernels, copies and memsets do their work on host memory (exact results). Timing:
// the same commands are timed exactly as in full mode, but no work is done and device
// memory is never touched (an allocation costs no host memory); a copy to the host writes
// zeros, the documented fill of timing mode. Host functions still run.
enum class ExecutionMode { Full, Timing };
const char* executionModeName(ExecutionMode m);

struct InitOptions {
  std::string backend;        // "sim", "native" or "auto" (native when a vendor runtime loads,
                              // has every symbol and reports a device; else sim, said on
                              // stderr); empty: CARDSIM_BACKEND, else "sim"
  std::string execution;      // "full" or "timing"; empty: CARDSIM_EXECUTION, else "full"
  std::string preset;         // empty: CARDSIM_PRESET, else "mlu370-x8"
  uint32_t devices = 0;       // 0: CARDSIM_DEVICES, else 8
  std::vector<std::string> overrides;  // "memory.bandwidth=3.2TB/s", applied last
  std::string overrides_file; // empty: CARDSIM_CONFIG
  bool status_board = true;   // false: no status file (cardsim smi does not list the process),
                              // for a tool's own short-lived helpers
  bool move_data = true;      // false (timing execution only): copies and memsets move no bytes
                              // at all, not even the small host data timing mode carries, for
                              // a tool re-timing a recording, where nothing reads them
};

// Optional: the first other call initializes from the environment. Calling again with
// different options after a successful start fails (one configuration per process).
Status initialize(const InitOptions& options = {});
std::vector<std::string> backendNames();
// The backend in use, after initialization ("sim" or "native").
std::string backendName();
// The execution mode (initializes the runtime if needed).
Status getExecutionMode(ExecutionMode* mode);

// ---- Devices ----------------------------------------------------------------------------

struct DeviceProperties {
  std::string name;                 // "MLU370-X8"
  std::string vendor;
  std::string preset;               // where the numbers came from
  std::string backend;              // "sim", or "native (CNRT 6.14.1, /usr/local/neuware/lib64/libcnrt.so)"
  uint64_t total_memory_bytes = 0;
  uint32_t cluster_count = 0;
  uint32_t cores_per_cluster = 0;
  double clock_hz = 0;
  double memory_bandwidth_bytes_per_s = 0;
  std::string memory_technology;
  // Matrix units (what GEMMs run at), per second; 0 = unsupported.
  double peak_fp64_flops = 0;
  double peak_fp32_flops = 0;
  double peak_tf32_flops = 0;
  double peak_fp16_flops = 0;
  double peak_bf16_flops = 0;
  double peak_int8_ops = 0;
  // Vector units (elementwise, reductions, everything but GEMMs), per second.
  double vector_peak_fp64_flops = 0;
  double vector_peak_fp32_flops = 0;
  double vector_peak_fp16_flops = 0;
  double vector_peak_bf16_flops = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  uint32_t pcie_generation = 0;
  uint32_t pcie_lanes = 0;
  double host_link_bandwidth_bytes_per_s = 0;  // one direction, achieved
  double host_link_latency_s = 0;              // fixed cost of one transfer over it
  uint32_t dma_engines = 0;
  uint32_t hardware_queues = 0;
};

Status getDeviceCount(int* count);
Status setDevice(int device);        // this thread's current device
Status getDevice(int* device);
Status getDeviceProperties(DeviceProperties* props, int device);
Status deviceSynchronize();          // waits for all work on the current device
Status deviceCanAccessPeer(int* can_access, int device, int peer);

// ---- Memory -------------------------------------------------------------------------------

// Allocates on the current device. 0 bytes gives nullptr and succeeds.
Status malloc(void** ptr, std::size_t bytes);
// Frees a pointer from malloc(); waits for the device first, as vendor runtimes do.
Status free(void* ptr);
// Free and total simulated memory of the current device.
Status memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes);
// Pinned host memory: copies from it are faster and truly asynchronous.
Status hostMalloc(void** ptr, std::size_t bytes);
Status hostFree(void* ptr);
// Registers existing host memory as pinned (page-locked): copies from it are then timed and
// queued as from pinned memory. The range must not overlap memory the runtime knows.
Status hostRegister(void* ptr, std::size_t bytes);
Status hostUnregister(void* ptr);

struct PointerAttributes {
  enum class Type { Unregistered, Host, Device } type = Type::Unregistered;
  int device = -1;                  // for Device
  void* base = nullptr;             // start of the allocation holding the pointer
  std::size_t size = 0;             // its size
};
Status pointerGetAttributes(PointerAttributes* attrs, const void* ptr);

enum class MemcpyKind { HostToDevice, DeviceToHost, DeviceToDevice, HostToHost, Default };

struct StreamObject;
struct EventObject;
using Stream = StreamObject*;   // nullptr: the current device's default stream
using Event = EventObject*;

Status memset(void* dev_ptr, int value, std::size_t bytes);
Status memsetAsync(void* dev_ptr, int value, std::size_t bytes, Stream stream);
// Synchronous copy: returns when the data is there, in simulated time too.
Status memcpy(void* dst, const void* src, std::size_t bytes, MemcpyKind kind);
Status memcpyAsync(void* dst, const void* src, std::size_t bytes, MemcpyKind kind, Stream stream);
// Copy between two devices; `stream` belongs to either of them.
Status memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                       std::size_t bytes, Stream stream);

// ---- Timing mode: host data the cards carry ------------------------------------------------
// In timing mode kernels do no work and device memory reads as zeros, except for small host
// data: a copy from the host of at most kTimingCarriedBytes is done, a copy to the host of at
// most that many bytes reads the memory, and the program can note writes it makes through
// host views (a collective's results). So what a program copies to the card, exchanges
// between ranks and reads back about its own bookkeeping keeps its value. Memory handed out
// anew must be scrubbed so that it reads as zeros again. Both calls do nothing in full mode.
constexpr std::size_t kTimingCarriedBytes = std::size_t(1) << 20;
Status timingNoteHostWrite(const void* dev_ptr, std::size_t bytes);
Status timingScrub(void* dev_ptr, std::size_t bytes);

// ---- Streams (queues) ---------------------------------------------------------------------

// Priorities follow the card: numerically between `least` and `greatest` as reported by
// deviceGetStreamPriorityRange (MLU: 7..0, CUDA-like cards: 0..-N); out-of-range values clamp.
Status streamCreate(Stream* stream, int priority = 0);   // on the current device
Status streamDestroy(Stream stream);
Status streamSynchronize(Stream stream);
Status streamQuery(Stream stream);           // Success when idle, NotReady otherwise
Status streamGetPriority(Stream stream, int* priority);
Status streamGetDevice(Stream stream, int* device);
Status streamGetId(Stream stream, uint32_t* id);   // unique per process; default streams 0
Status streamWaitEvent(Stream stream, Event event);
Status deviceGetStreamPriorityRange(int* least, int* greatest);

// ---- Events (notifiers) ----------------------------------------------------------------

enum EventFlags : unsigned {
  kEventDefault = 0,
  kEventDisableTiming = 1,
  kEventBlockingSync = 2,
  kEventInterprocess = 4,
  // The runtime's own marker (where a receive was posted, for the fabric): recording it costs
  // the host no time, as the vendor library's bookkeeping costs the program none.
  kEventRuntimeMarker = 8,
};

Status eventCreate(Event* event, unsigned flags = kEventDefault);
Status eventDestroy(Event event);
Status eventRecord(Event event, Stream stream);
Status eventQuery(Event event);              // Success when reached (or never recorded)
Status eventSynchronize(Event event);
// Simulated milliseconds between two completed events.
Status eventElapsedTime(float* ms, Event start, Event end);

// ---- Kernels ------------------------------------------------------------------------------

enum class DataType : uint8_t { Float64, Float32, TFloat32, Float16, BFloat16, Int8 };
enum class KernelClass : uint8_t { Gemm, Elementwise, Reduction, Other };

// What the model needs to time a kernel.
struct KernelCost {
  KernelClass kernel_class = KernelClass::Other;
  DataType dtype = DataType::Float32;
  double flops = 0;
  double bytes_read = 0;
  double bytes_written = 0;
  uint32_t tiles = 0;    // 0: let the model tile it
  // A node of a captured graph, launched on its own (a replay of a Chakra trace whose
  // kernels a graph launched): the graph's dispatch latency, and no host launch cost.
  bool graph_node = false;
};

// Runs `work` now, on this thread (the result is exact and visible at once), and queues
// the kernel's cost on `stream` for the timing model.
Status launchKernel(Stream stream, std::string_view name, const KernelCost& cost,
                    const std::function<void()>& work);

// Queues `seconds` of device time on `stream` for a communication step whose duration the
// caller modelled (the alpha-beta cost of a collective, until the fabric model times it).
// It occupies the stream's queue only, no compute or memory resource.
Status launchCollective(Stream stream, std::string_view name, double seconds);

// A collective on the preset's collective fabric (see README, "Collective fabric").
struct CollectiveDesc {
  std::string op;              // "all_reduce", "all_gather", "reduce_scatter", "broadcast",
                               // "reduce", "all_to_all", "send_recv", "barrier"
  double bytes = 0;            // nccl-tests' size: per-rank buffer (all_reduce, broadcast,
                               // reduce), gathered output (all_gather), input (reduce_scatter),
                               // one rank's send buffer (all_to_all), the message (send_recv)
  std::vector<int> ranks;      // the group's global ranks in group order; rank r's device is
                               // device r of the fabric (one device per rank)
  int root = 0;                // index into ranks: broadcast/reduce root, send_recv source
  int peer = 1;                // index into ranks: send_recv destination
  std::string algorithm;       // "ring", "tree", "direct", "hierarchical", "switch"; empty:
                               // CARDSIM_COLL_ALGO, else the fastest on an idle fabric
  std::string group;           // the process group's key, the same on every member (its
                               // collectives are numbered in call order); empty: the ranks
  double timeout_s = 0;        // the process group's timeout; 0: none
  std::string dtype;           // the element type, for traces ("bfloat16"); empty: unknown
  std::string reduce_op;       // a reduction's operation ("sum", "max"); empty: none or unknown.
                               // With a fabric server, members of a reduction that disagree on
                               // it or on dtype fail it on every member, named
  std::string refused;         // why this member cannot run it (its library refused the call
                               // here alone); with a fabric server it fails on every member
  // all_to_all with uneven splits: the bytes this rank sends each member, in group order
  // (its own entry stays on its card; `bytes` is their sum). Empty: bytes / members to
  // each. With a fabric server the members' sends make the exchange's matrix; timed alone,
  // every member is taken to send as this one does, rotated (member i sends member i + k
  // what this rank sends its k-th next).
  std::vector<double> send_bytes;
  // ... and the bytes it expects from each member (its output splits). With a fabric server,
  // a member expecting other than what its peer sends fails the collective on every member,
  // naming both, before any byte moves (Gloo would abort the process).
  std::vector<double> recv_bytes;
  // Point to point (op "send_recv", ranks [source, destination], root 0, peer 1): which side
  // this rank is. None: the transfer is timed on this rank alone. Send and Recv are joined
  // on a fabric server by (group, source, destination, tag), in call order on each side.
  enum class PointToPoint : uint8_t { None, Send, Recv };
  PointToPoint p2p = PointToPoint::None;
  int tag = 0;
  // Recv: an event recorded on the receiving stream when the receive was posted; the
  // transfer may start from then on (the receive's arrival). Null: when `stream` gets to it.
  Event posted{};
  // With a fabric server (not a point-to-point side): report the arrival and return at
  // once; fabricSettle() awaits the server's answer (the caller's bytes move meanwhile). No
  // simulation runs past an unanswered collective: it is settled first, by whichever thread
  // needs the simulation. The returned seconds are then the model's time for it alone.
  bool answer_later = false;
  // Timed without a fabric server only: the other members reach the collective this long
  // after this one (a lone rank file's replay, whose replicas would otherwise arrive with
  // it: what the recorded rank waited there for slower ranks). Its command holds the
  // stream that much longer, as the waiting member's did.
  uint64_t peers_late_ps = 0;
};

// Queues the collective on `stream`. Connected to a fabric server (fabricConnect) and with
// more than one rank, it starts when the stream can start it (this rank's arrival) and
// completes at the time the server computes from every member's arrival, the same on every
// rank; the call blocks until every member has arrived, and a member that left or did not
// arrive within `timeout_s` fails it with CommFailed naming the group, the collective and
// the missing ranks. Point to point with a server: a Send is reported and does not wait (it
// takes the model's time from its own arrival, as a buffered send does); a Recv blocks until
// its Send is reported and completes at the later of the two arrivals (the Recv's from
// `posted`) plus the model's time, so a receiver never finishes before its sender began.
// Otherwise the collective takes the time the fabric model gives it alone on an idle
// fabric, from this rank's own arrival. Returns the model's time for the collective (from
// the last member's arrival) and the algorithm.
Status launchFabricCollective(Stream stream, const CollectiveDesc& desc, double* seconds,
                              std::string* algorithm);
// Awaits the server's answers to the collectives launched with answer_later; CommFailed
// with the server's words for the first of this thread's that failed (another thread's
// failures are its own to report). Ok at once when none is outstanding.
Status fabricSettle();

// ---- The fabric server (one shared fabric for the ranks of a job, one process per rank) ---

// Starts a fabric server for this process's preset on a background thread (rank 0 of a job
// does this) listening on `bind` ("127.0.0.1", or "0.0.0.0" for jobs spanning hosts) and
// `port` (0: any free port); returns the port. It serves until the process exits. It also
// listens on a Unix-domain socket for ranks on this host (cheaper per message than loopback
// TCP): `local_address` gets its address ("unix:@NAME", for fabricConnect). A second call
// returns the running server's port and address.
Status fabricServe(const std::string& bind, uint16_t port, uint16_t* bound_port, std::string* local_address = nullptr);
// Joins the job's fabric at "host:port" as `rank` of `world_size` (`job` the same string on
// every rank). Once per process; a second call with another address fails.
// `connect_timeout_s`: how long to retry a refused connection and wait for the server's
// welcome (the process group's timeout; <= 0: 30 s).
Status fabricConnect(const std::string& address, const std::string& job, int rank, int world_size,
                     double connect_timeout_s = 30);
// The connected server's address, or empty.
Status fabricAddress(std::string* address);
// This rank waits (parked) or no longer waits on something outside the fabric server that
// only another rank's progress ends (a point-to-point receive, say), so that the server
// need not wait for this rank's next collective before answering the others'. Nothing
// without a fabric server.
Status fabricPark(bool parked);
// Which of `ranks` (global) have left the job, with how each left, as the fabric server saw
// them go (asked when a transfer of a collective's bytes failed); waits up to `timeout_s`.
// NotSupported without a fabric server.
Status fabricGone(const std::vector<int>& ranks, double timeout_s, std::vector<std::pair<int, std::string>>* gone);
// Leaves the fabric: what this rank already sent (an eager send whose receiver still needs
// it) reaches the server first, then the connection closes (bounded: 2 s). The end of the
// process does this too; call it before leaving by _exit. Nothing without a connection.
Status fabricDisconnect();

// Runs `fn` on the host in stream order (as cnrtInvokeHostFunc / a host function node). Work
// is functional first, so outside a capture `fn` runs now, on this thread, for one launch
// overhead and no device time. While the stream captures, `fn` becomes a host node of the
// graph and runs at each replay, in order with the graph's other work; the graph owns
// whatever `fn` holds (staging buffers, the tensors it writes).
Status launchHostFunc(Stream stream, std::function<void()> fn);

// ---- Communicators: the vendor's collective library (native backend) ---------------------
// CNCL (libcncl.so beside libcnrt.so) for MLU presets, BCCL ($BIREN_HOME/bccl/libbccl.so)
// for BR presets. One rank per communicator: rank 0 makes the clique id, the job shares it
// (through its store), every rank calls commInitRank on its current device. The emulator
// has no vendor library: its collectives run in the torch layer (c10d over Gloo), and these
// calls return NotSupported there.

struct CommObject;
using Comm = CommObject*;
enum class CommDataType : uint8_t { Float16, BFloat16, Float32, Float64, Int8, UInt8, Int32, Int64 };
enum class CommReduceOp : uint8_t { Sum, Prod, Max, Min };
enum class CommOp : uint8_t { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, Send, Recv };
struct CommCall {
  CommOp op = CommOp::AllReduce;
  const void* send = nullptr;   // Send's buffer; Recv has none
  void* recv = nullptr;         // Recv's buffer; Send has none
  std::size_t count = 0;        // elements: per rank (AllGather: sent; ReduceScatter: received)
  CommDataType dtype = CommDataType::Float32;
  CommReduceOp reduce = CommReduceOp::Sum;
  int root = 0;                 // Broadcast/Reduce: the root; Send/Recv: the peer
};

Status commGetUniqueId(std::string* id);   // opaque bytes
Status commInitRank(Comm* comm, int nranks, const std::string& id, int rank);
Status commDestroy(Comm comm);
Status commLaunch(const CommCall& call, Comm comm, Stream stream);   // queued on `stream`
Status commGroupStart();
Status commGroupEnd();

// ---- Graphs (stream capture) -------------------------------------------------------------

// While a stream captures, kernels, memsets and asynchronous copies queued on it are
// recorded instead of run; synchronizing calls on it fail and invalidate the capture, as
// on the card. Another stream that waits on an event recorded in the capture joins it
// (fork) until the capturing stream waits on an event it recorded (join). A launched graph
// queues the origin's work on the launch stream and each joined stream's on a lane of its
// own, ordered by the events recorded and waited inside the capture (so captured branches
// overlap at replay as they did when queued), with the card's lower per-kernel graph
// dispatch cost, for one host launch overhead (plus 1 ns per node); the nodes' host work
// runs in capture order. The default stream cannot capture.
struct GraphObject;
using Graph = GraphObject*;

// Capture modes (as cudaStreamCaptureMode): while a capture is under way, potentially unsafe
// calls — allocating or freeing device memory, synchronous copies and memsets, synchronizing
// or querying streams, events or the device — fail and invalidate the capture: a global
// capture prohibits them on its own thread and on every other thread whose mode is global; a
// thread_local capture only on its own thread; a relaxed capture nowhere. A thread's own mode
// (threadExchangeCaptureMode, global by default) set to relaxed exempts its calls (allocators
// do this around their own bookkeeping). Synchronizing the capturing stream itself is never
// allowed.
enum class CaptureMode { Global, ThreadLocal, Relaxed };
const char* captureModeName(CaptureMode m);
Status streamBeginCapture(Stream stream);   // global
Status streamBeginCapture(Stream stream, CaptureMode mode);
Status threadExchangeCaptureMode(CaptureMode* mode);   // sets this thread's mode, returns the old one
Status streamEndCapture(Stream stream, Graph* graph);
Status streamIsCapturing(Stream stream, bool* capturing);
Status graphNodeCount(Graph graph, std::size_t* count);
// What a graph holds, node by node in replay order (for debug dumps).
struct GraphNodeInfo {
  std::string name;          // the operator or copy
  std::string kind;          // kernel, memcpy HtoD/DtoH/DtoD/peer, memset, event record/wait, collective, host
  uint32_t stream_id = 0;    // the captured stream it was queued on
  double flops = 0;
  double bytes = 0;          // moved (copies) or read + written (kernels)
  int event = -1;            // event record/wait inside the capture: the graph's number of the event
};
Status graphDescribe(Graph graph, std::vector<GraphNodeInfo>* nodes);
Status graphLaunch(Graph graph, Stream stream);
Status graphDestroy(Graph graph);

// ---- Simulated time and activity records ------------------------------------------

// This thread's virtual host clock, in picoseconds.
Status hostTimePs(uint64_t* ps);

// Host time across threads. A thread that hands its work to another and waits for it (the
// autograd engine runs backward for a device on its own thread while the caller blocks) must
// not let that work cost it nothing, nor let the worker start before the hand-off. Between
// begin and end, every host thread of the process advances one shared clock that starts at
// the caller's time; at the end, the caller continues from it and a participating thread
// that calls in later starts no earlier than it. Calls nest (only the outermost pair acts).
Status hostClockShareBegin();
Status hostClockShareEnd();
// A thread that waited for another (a join) continues no earlier than `ps`, the other
// thread's clock when it finished.
Status hostClockJoin(uint64_t ps);
// This thread's clock, and whether it has one yet (a thread that never called the runtime
// has none: `started` is false and `ps` is 0).
Status hostThreadClock(uint64_t* ps, bool* started);

struct ActivityRecord {
  enum class Kind { Kernel, MemcpyHtoD, MemcpyDtoH, MemcpyDtoD, MemcpyPeer, Memset,
                    EventRecord, EventWait, Collective };
  Kind kind = Kind::Kernel;
  int device = 0;
  uint32_t stream_id = 0;
  uint32_t hardware_queue = 0;
  std::string name;
  uint64_t submit_ps = 0;   // when the host handed it to the device
  uint64_t start_ps = 0;
  uint64_t end_ps = 0;
  double flops = 0;
  uint64_t bytes = 0;
  uint64_t correlation = 0;   // setCorrelationId's id on the submitting thread (0: none)
};
const char* activityKindName(ActivityRecord::Kind k);

// Profilers: every command the calling thread submits from now on carries `id` (0: none)
// back in its ActivityRecord, tying the device's work to the host operation that launched it.
void setCorrelationId(uint64_t id);
uint64_t currentCorrelationId();

// While on, every completed command is recorded; drain returns them in completion order.
Status setActivityRecording(bool on);
Status drainActivities(std::vector<ActivityRecord>* out);

// ---- Async-correctness checker (CARDSIM_CHECK=async) ------------------------------------

// Reports what a real card shows only as intermittent corruption: memory used by two streams,
// or by a stream and the host, with nothing ordering the uses (an event wait, a synchronize),
// where one of them writes. The runtime tracks the ordering calls itself; the framework layer
// tells it which memory each operator touches (checkDeviceAccess), which host memory the host
// touches (checkHostAccess) and which blocks its allocator takes back (checkBlockFreed). A
// `site` is the framework's handle for where the access came from (a Python stack).
struct CheckReport {
  enum class Kind {
    StreamRace,    // a tensor used on another stream without an event wait
    FreedReuse,    // a freed block handed out again while a stream still used it (no record_stream)
    GraphReplay,   // memory a graph replay uses, touched while the replay may be in flight
    HostRead,      // the host used memory a queued device-to-host copy has not finished writing
    HostWrite,     // the host wrote memory a queued host-to-device copy has not finished reading
  };
  struct Side {
    uint64_t site = 0;
    bool host = false;        // the host itself (else a stream)
    uint32_t stream_id = 0;   // streamGetId
    int device = -1;
    bool write = false;
    uint64_t graph = 0;       // a graph replay's accesses: the graph (numbered from 1 per process)
  };
  Kind kind = Kind::StreamRace;
  uintptr_t address = 0;      // the overlapping bytes
  std::size_t bytes = 0;
  int memory_device = -1;     // whose memory (-1: host memory)
  Side producer, offender;    // the earlier access and the one not ordered after it
};
const char* checkKindName(CheckReport::Kind k);

// Off by default; turning it on starts from a clean slate (earlier work counts as ordered).
Status checkEnable(bool on);
bool checkEnabled();
void checkSetSite(uint64_t site);   // this thread's site for the accesses that follow
Status checkDeviceAccess(Stream stream, const void* dev_ptr, std::size_t bytes, bool write);
Status checkHostAccess(const void* host_ptr, std::size_t bytes, bool write);
Status checkBlockFreed(const void* dev_ptr, std::size_t bytes);
std::size_t checkPendingReports();

// Device memory the host cannot touch (HostAccessGuard): while on, device allocations are
// mapped inaccessible except inside a window — the runtime's own copies, memsets, kernel
// work and replays open one, and the framework layer opens one around its operators. A host
// dereference of device memory outside (data_ptr() in an extension) stops the process with
// a message naming the allocation, as the access would crash on a real card.
Status checkGuardDeviceMemory(bool on);
void checkHostWindowOpen();
void checkHostWindowClose();
Status checkDrainReports(std::vector<CheckReport>* out);

}  // namespace cardsim::shim

// For ctypes (cardsim_torch.distributed writes collective results through host views):
// timingNoteHostWrite; 0 on success, else the shim Code.
extern "C" int cardsim_timing_note_host_write(const void* dev_ptr, std::size_t bytes);
