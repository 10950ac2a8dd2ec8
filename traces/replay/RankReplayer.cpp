#include "traces/replay/RankReplayer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <exception>
#include <thread>
#include <optional>

#include "cardsim/trace.h"
#include "device_models/Command.h"
#include "traces/lib/PeersLate.h"
#include "traces/lib/TraceError.h"
#include "traces/lib/TraceReader.h"

namespace cardsim::replay {

// Host memory standing in for the program's: reserved address space only (no host memory
// is used until something writes it, which in timing mode only copies to the host do).
struct RankReplayer::HostRegion {
  void* base = nullptr;
  std::size_t bytes = 0;
  trace::MemoryKind kind = trace::MEMORY_HOST_PINNED;
  explicit HostRegion(std::size_t n, trace::MemoryKind k) : bytes(std::max<std::size_t>(n, 1)), kind(k) {
    if (kind == trace::MEMORY_HOST_PINNED) {
      if (!shim::hostMalloc(&base, bytes).ok()) base = nullptr;
    } else {
      base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (base == MAP_FAILED) base = nullptr;
    }
    if (!base) throw std::runtime_error("cannot reserve " + std::to_string(bytes) + " bytes of host memory");
  }
  ~HostRegion() {
    if (kind == trace::MEMORY_HOST_PINNED) {
      (void)shim::hostFree(base);
    } else {
      if (kind == trace::MEMORY_HOST_REGISTERED) (void)shim::hostUnregister(base);
      ::munmap(base, bytes);
    }
  }
};

namespace {

std::string joinRanks(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

// Runs `f` on a thread of its own, whose host clock is not the replayed thread's: what the
// replay sets up in place of things made before the recording (stand-ins) costs the
// replayed program no time. Returns what `f` returns; rethrows what it throws.
template <class F>
auto offTheClock(F f) -> decltype(f()) {
  std::optional<decltype(f())> result;
  std::exception_ptr error;
  std::thread([&] {
    shim::traceThisThread(false);   // the replay's own, not the program's: not in its trace
    try {
      result.emplace(f());
    } catch (...) {
      error = std::current_exception();
    }
  }).join();
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

shim::MemcpyKind copyKind(trace::CopyKind k) {
  switch (k) {
    case trace::COPY_HOST_TO_DEVICE: return shim::MemcpyKind::HostToDevice;
    case trace::COPY_DEVICE_TO_HOST: return shim::MemcpyKind::DeviceToHost;
    case trace::COPY_DEVICE_TO_DEVICE: return shim::MemcpyKind::DeviceToDevice;
    case trace::COPY_HOST_TO_HOST: return shim::MemcpyKind::HostToHost;
    default: return shim::MemcpyKind::Default;
  }
}

}  // namespace

RankReplayer::RankReplayer(std::string path, ReplayOptions options)
    : path_(std::move(path)), options_(options) {}

RankReplayer::~RankReplayer() {
  host_blocks_.clear();
  pageable_.reset();
  pinned_.reset();
}

void RankReplayer::check(shim::Status s, const trace::Envelope& e, const char* what) {
  if (s.ok()) return;
  // A recorded collective no other rank's file ever reaches: the files do not belong
  // together (bad input, as a mixed directory is), not a failure of the replay.
  const std::string text = s.toString();
  if (std::string(what).rfind("collective", 0) == 0 && text.find("never started it") != std::string::npos)
    throw trace::TraceError(path_ + ": record " + std::to_string(record_) + " (call " + std::to_string(e.call()) +
                            ", " + what + "): the other ranks' files never reach this collective: " + text +
                            "; the rank files are not of one recording");
  const std::string where =
      path_ + ": record " + std::to_string(record_) + " (call " + std::to_string(e.call()) + ", " + what + "): ";
  if (s.code() == shim::Code::OutOfMemory || s.code() == shim::Code::TimeOverflow)
    throw WhatIfError(where + "the what-if cannot replay it: " + s.toString());
  throw std::runtime_error(where + "the replay failed: " + s.toString());
}

shim::Stream RankReplayer::stream(uint32_t id, const trace::Envelope& e) {
  if (id == 0) return nullptr;   // the current device's default stream
  auto it = streams_.find(id);
  if (it != streams_.end()) return it->second;
  // Created before the recording started: a stand-in on the device the call named.
  shim::Stream s = nullptr;
  check(offTheClock([&] {
          shim::Status st = e.device() >= 0 ? shim::setDevice(e.device()) : shim::Status::Ok();
          return st.ok() ? shim::streamCreate(&s, 0) : st;
        }),
        e, "a stream created before the recording");
  streams_[id] = s;
  return s;
}

shim::Event RankReplayer::event(uint32_t id, const trace::Envelope& e) {
  auto it = events_.find(id);
  if (it != events_.end()) return it->second;
  // Recorded before the recording too, as far as anything in it can tell (a wait on it
  // is a wait, as recorded): on a stream of its own, with nothing before it.
  shim::Event ev = nullptr;
  check(offTheClock([&] {
          shim::Status st = e.device() >= 0 ? shim::setDevice(e.device()) : shim::Status::Ok();
          shim::Stream idle = nullptr;
          if (st.ok()) st = shim::eventCreate(&ev, shim::kEventDefault);
          if (st.ok()) st = shim::streamCreate(&idle, 0);
          if (st.ok()) st = shim::eventRecord(ev, idle);
          if (idle) (void)shim::streamDestroy(idle);
          return st;
        }),
        e, "an event created before the recording");
  events_[id] = ev;
  return ev;
}

void* RankReplayer::devicePointer(uint64_t address, uint64_t bytes, int device, const trace::Envelope& e) {
  uint64_t base = address, need = std::max<uint64_t>(bytes, 1);
  auto it = device_blocks_.upper_bound(address);
  if (it != device_blocks_.begin()) {
    --it;
    if (address < it->first + it->second.bytes) {
      // A stand-in used further than first seen (the program's buffer from before the
      // recording, or a Chakra import's, is as large as its largest use): a larger one.
      if (!it->second.stand_in || address + need <= it->first + it->second.bytes)
        return static_cast<char*>(it->second.ptr) + (address - it->first);
      base = it->first;
      need = std::max(address + need - base, 2 * it->second.bytes);
      device = it->second.device;
      outgrown_.push_back(it->second.ptr);   // not freed: a queued copy may still use it
      device_blocks_.erase(it);
    }
  }
  // Allocated before the recording started: a stand-in of the size this call touches.
  const shim::Status st = offTheClock([&] {
    void* p = nullptr;
    shim::Status s = device >= 0 ? shim::setDevice(device) : shim::Status::Ok();
    if (s.ok()) s = shim::malloc(&p, need);
    if (s.ok()) device_blocks_[base] = DeviceBlock{p, need, device, true};
    return s;
  });
  check(st, e, "a stand-in for memory allocated before the recording");
  void* p = device_blocks_.at(base).ptr;
  return static_cast<char*>(p) + (address - base);
}

void* RankReplayer::hostPointer(uint64_t address, uint64_t bytes, bool pinned) {
  auto it = host_blocks_.upper_bound(address);
  if (it != host_blocks_.begin()) {
    --it;
    if (address < it->first + it->second->bytes) return static_cast<char*>(it->second->base) + (address - it->first);
  }
  // The program's own (pageable) buffers: one reserved region serves them all; pinned ones
  // from before the recording (the copy says so), another, pinned.
  std::unique_ptr<HostRegion>& region = pinned ? pinned_ : pageable_;
  if (!region || region->bytes < bytes) {
    region.reset();
    region = offTheClock([&] {
      return std::make_unique<HostRegion>(std::max<std::size_t>(bytes, 1 << 20),
                                          pinned ? trace::MEMORY_HOST_PINNED : trace::MemoryKind(-1));
    });
  }
  return region->base;
}

void RankReplayer::standIns(const trace::Envelope& e) {
  switch (e.record_case()) {
    case trace::Envelope::kMemcpy: {
      const trace::Memcpy& m = e.memcpy();
      dst_ = m.dst_device() >= 0 ? devicePointer(m.dst(), m.bytes(), m.dst_device(), e)
                                 : hostPointer(m.dst(), m.bytes(), m.host_pinned());
      src_ = m.src_device() >= 0 ? devicePointer(m.src(), m.bytes(), m.src_device(), e)
                                 : hostPointer(m.src(), m.bytes(), m.host_pinned());
      (void)stream(m.stream(), e);
      return;
    }
    case trace::Envelope::kMemset:
      dst_ = devicePointer(e.memset().address(), e.memset().bytes(), e.device(), e);
      (void)stream(e.memset().stream(), e);
      return;
    case trace::Envelope::kKernel: (void)stream(e.kernel().stream(), e); return;
    case trace::Envelope::kCollective: (void)stream(e.collective().stream(), e); return;
    default: return;
  }
}

void RankReplayer::alignClock(const trace::Envelope& e) {
  const uint32_t t = e.thread();
  if (last_thread_ && *last_thread_ != t) {
    // A thread idle since before the other's latest call began (or new) was waiting on that
    // thread (the autograd engine's thread handed a backward pass by the main thread, the
    // main thread resuming when it is done, a worker started): it goes on as far ahead of or
    // behind the recording as that thread is. Without it, on a faster what-if the thread
    // handed the work would start it at its recorded time and everything after would wait.
    const auto mine = spans_.find(t);
    const Span& other = spans_[*last_thread_];
    if (mine == spans_.end() || mine->second.end_ps <= other.begin_ps) drift_ps_[t] = drift_ps_[*last_thread_];
  }
  const int64_t target = static_cast<int64_t>(e.host_begin_ps()) + drift_ps_[t];
  uint64_t now = 0;
  (void)shim::hostTimePs(&now);
  if (target > static_cast<int64_t>(now)) (void)shim::hostClockJoin(static_cast<uint64_t>(target));
  if (e.device() >= 0) useDevice(e.device(), e);
}

int RankReplayer::currentDevice() {
  if (device_ < 0) (void)shim::getDevice(&device_);
  return device_;
}

void RankReplayer::useDevice(int device, const trace::Envelope& e, bool always) {
  if (!always && device == currentDevice()) return;
  device_ = -1;   // unknown, should the call fail
  check(shim::setDevice(device), e, "setDevice");
  device_ = device;
}

void RankReplayer::noteClock(const trace::Envelope& e) {
  uint64_t now = 0;
  (void)shim::hostTimePs(&now);
  drift_ps_[e.thread()] = static_cast<int64_t>(now) - static_cast<int64_t>(e.host_end_ps());
  spans_[e.thread()] = Span{e.host_begin_ps(), e.host_end_ps()};
  last_thread_ = e.thread();
}

void RankReplayer::readCollectiveCommands() {
  trace::TraceReader reader(path_);
  reader.skipCrc(options_.verified);
  while (const trace::Envelope* e = reader.next())
    if (e->record_case() == trace::Envelope::kCommand && e->command().kind() == trace::DeviceCommand::COLLECTIVE &&
        e->command().call() != 0)
      collective_commands_[e->command().call()] = Span{e->command().start_ps(), e->command().end_ps()};
}

// What the recorded rank waited at collective call `e` for slower ranks (PeersLate.h): from
// its recorded command, or as a converted file carries it.
uint64_t RankReplayer::peersLatePs(const trace::Envelope& e) {
  auto it = collective_commands_.find(e.call());
  const bool have = it != collective_commands_.end();
  const uint64_t late = peers_late_.at(e, have ? &it->second.begin_ps : nullptr, have ? &it->second.end_ps : nullptr);
  return have ? late : e.collective().peers_late_ps();
}

void RankReplayer::run() {
  if (options_.scale_ranks > 0) readCollectiveCommands();
  trace::TraceReader reader(path_);
  world_ = std::max(1, reader.header().world_size());
  reader.skipCommands(true);   // the recorded commands' results: the replay makes its own
  reader.skipCrc(options_.verified);
  while (const trace::Envelope* next = reader.next()) {
    const trace::Envelope& e = *next;
    record_ = reader.recordIndex() - 1;
    if (e.record_case() == trace::Envelope::kName) {
      names_[e.name().id()] = e.name().text();
      continue;
    }
    if (e.call() == 0) continue;   // device results
    if (replayQuery(e)) continue;
    if (e.status() != 0) continue;   // calls that failed
    if (e.record_case() == trace::Envelope::kApi) {
      const auto api = e.api().api();
      if (api == trace::ApiCall::CLOCK_SHARE_BEGIN || api == trace::ApiCall::CLOCK_SHARE_END ||
          api == trace::ApiCall::CLOCK_JOIN)
        continue;   // the replay keeps each thread's clock itself
    }
    try {
      standIns(e);   // before the call's time: their set-up is no part of the program's calls
      alignClock(e);
      replay(e);
      noteClock(e);
    } catch (const std::overflow_error& x) {   // simulated time's end, met outside a shim call's status
      throw WhatIfError(path_ + ": record " + std::to_string(record_) + " (call " + std::to_string(e.call()) +
                        "): the what-if cannot replay it: " + x.what());
    }
    ++calls_;
  }
}

bool RankReplayer::replayQuery(const trace::Envelope& e) {
  const bool event_query = e.record_case() == trace::Envelope::kEvent && e.event().op() == trace::EventOp::QUERY;
  const bool stream_query = e.record_case() == trace::Envelope::kStream && e.stream().op() == trace::StreamOp::QUERY;
  Polling& poll = polling_[e.thread()];
  if (!event_query && !stream_query) {
    poll = Polling{};   // any other call ends a polling loop
    return false;
  }
  const uint64_t key = (event_query ? uint64_t{1} << 32 : uint64_t{2} << 32) |
                       (event_query ? e.event().event() : e.stream().stream());
  if (poll.key != key) poll = Polling{key, false};
  const bool recorded_ready = e.status() == 0;
  const bool recorded_not_ready = e.status() == static_cast<int>(shim::Code::NotReady);
  if (!recorded_ready && !recorded_not_ready) return true;   // failed: not replayed
  if (!recorded_ready && poll.done_early) return true;       // the replayed program left its loop already
  if (recorded_ready && poll.done_early) {
    // Its loop ended at the query that found the card done: the recording's polling after
    // that is no time of the replay's.
    uint64_t now = 0;
    (void)shim::hostTimePs(&now);
    drift_ps_[e.thread()] = std::min(drift_ps_[e.thread()], static_cast<int64_t>(now) - static_cast<int64_t>(e.host_begin_ps()));
  }
  alignClock(e);
  auto query = [&] {
    return event_query ? shim::eventQuery(event(e.event().event(), e)) : shim::streamQuery(stream(e.stream().stream(), e));
  };
  const shim::Status st = query();
  if (!recorded_ready && st.ok()) {
    poll.done_early = true;   // done sooner than recorded: the program stops polling here
  } else if (recorded_ready && !st.ok()) {
    // Done later than recorded: the program would have polled on until it was.
    check(event_query ? shim::eventSynchronize(event(e.event().event(), e))
                      : shim::streamSynchronize(stream(e.stream().stream(), e)),
          e, "synchronize (a polling loop's wait)");
  }
  if (recorded_ready) poll = Polling{};
  noteClock(e);
  ++calls_;
  return true;
}

void RankReplayer::replay(const trace::Envelope& e) {
  switch (e.record_case()) {
    case trace::Envelope::kAlloc: {
      const trace::Alloc& a = e.alloc();
      if (a.kind() == trace::MEMORY_DEVICE) {
        void* p = nullptr;
        check(shim::malloc(&p, a.bytes()), e, "malloc");
        device_blocks_[a.address()] = DeviceBlock{p, std::max<uint64_t>(a.bytes(), 1), e.device()};
      } else {
        auto region = std::make_unique<HostRegion>(a.bytes(), a.kind());
        if (a.kind() == trace::MEMORY_HOST_REGISTERED) check(shim::hostRegister(region->base, a.bytes()), e, "hostRegister");
        host_blocks_[a.address()] = std::move(region);
      }
      return;
    }
    case trace::Envelope::kFree: {
      const trace::Free& f = e.free();
      if (f.kind() == trace::MEMORY_DEVICE) {
        auto it = device_blocks_.find(f.address());
        if (it == device_blocks_.end()) return;   // allocated before the recording and never used
        check(shim::free(it->second.ptr), e, "free");
        device_blocks_.erase(it);
      } else {
        host_blocks_.erase(f.address());   // the region's destructor frees or unregisters it
      }
      return;
    }
    case trace::Envelope::kMemcpy: {
      const trace::Memcpy& m = e.memcpy();
      void* dst = dst_;         // resolved by standIns()
      const void* src = src_;
      if (m.kind() == trace::COPY_PEER) {
        check(shim::memcpyPeerAsync(dst, m.dst_device(), src, m.src_device(), m.bytes(), stream(m.stream(), e)), e,
              "memcpyPeerAsync");
      } else if (m.async()) {
        check(shim::memcpyAsync(dst, src, m.bytes(), copyKind(m.kind()), stream(m.stream(), e)), e, "memcpyAsync");
      } else {
        check(shim::memcpy(dst, src, m.bytes(), copyKind(m.kind())), e, "memcpy");
      }
      return;
    }
    case trace::Envelope::kMemset: {
      const trace::Memset& m = e.memset();
      void* p = dst_;   // resolved by standIns()
      if (m.async())
        check(shim::memsetAsync(p, m.value(), m.bytes(), stream(m.stream(), e)), e, "memsetAsync");
      else
        check(shim::memset(p, m.value(), m.bytes()), e, "memset");
      return;
    }
    case trace::Envelope::kKernel: {
      const trace::KernelLaunch& k = e.kernel();
      shim::KernelCost cost;
      cost.kernel_class = static_cast<shim::KernelClass>(k.kernel_class());
      cost.dtype = static_cast<shim::DataType>(k.dtype());
      cost.flops = k.flops();
      cost.bytes_read = k.bytes_read();
      cost.bytes_written = k.bytes_written();
      cost.tiles = k.tiles();
      cost.graph_node = k.graph_node();
      if (options_.keep_shapes && k.shapes_size() > 0) {   // the replay's own trace keeps them, as the recording did
        std::vector<std::vector<int64_t>> shapes;
        shapes.reserve(static_cast<std::size_t>(k.shapes_size()));
        for (const trace::Shape& sh : k.shapes()) shapes.emplace_back(sh.dims().begin(), sh.dims().end());
        shim::traceNextKernelShapes(std::move(shapes), k.output_shapes());
      }
      auto name = names_.find(k.name());
      check(shim::launchKernel(stream(k.stream(), e), name == names_.end() ? "kernel" : name->second, cost, [] {}), e,
            "launchKernel");
      return;
    }
    case trace::Envelope::kEvent: {
      const trace::EventOp& op = e.event();
      switch (op.op()) {
        case trace::EventOp::CREATE: {
          shim::Event ev = nullptr;
          check(shim::eventCreate(&ev, op.flags()), e, "eventCreate");
          events_[op.event()] = ev;
          return;
        }
        case trace::EventOp::DESTROY: {
          auto it = events_.find(op.event());
          if (it == events_.end()) return;
          check(shim::eventDestroy(it->second), e, "eventDestroy");
          events_.erase(it);
          return;
        }
        case trace::EventOp::RECORD:
          check(shim::eventRecord(event(op.event(), e), stream(op.stream(), e)), e, "eventRecord");
          return;
        case trace::EventOp::WAIT:
          check(shim::streamWaitEvent(stream(op.stream(), e), event(op.event(), e)), e, "streamWaitEvent");
          return;
        case trace::EventOp::SYNCHRONIZE:
          check(shim::eventSynchronize(event(op.event(), e)), e, "eventSynchronize");
          return;
        case trace::EventOp::ELAPSED: {
          float ms = 0;
          (void)shim::eventElapsedTime(&ms, event(op.event(), e), event(op.other_event(), e));
          return;
        }
        default: return;
      }
    }
    case trace::Envelope::kStream: {
      const trace::StreamOp& op = e.stream();
      switch (op.op()) {
        case trace::StreamOp::CREATE: {
          shim::Stream s = nullptr;
          check(shim::streamCreate(&s, op.priority()), e, "streamCreate");
          streams_[op.stream()] = s;
          return;
        }
        case trace::StreamOp::DESTROY: {
          auto it = streams_.find(op.stream());
          if (it == streams_.end()) return;
          check(shim::streamDestroy(it->second), e, "streamDestroy");
          streams_.erase(it);
          return;
        }
        case trace::StreamOp::SYNCHRONIZE:
          check(shim::streamSynchronize(stream(op.stream(), e)), e, "streamSynchronize");
          return;
        default: return;
      }
    }
    case trace::Envelope::kGraph: {
      const trace::GraphOp& op = e.graph();
      switch (op.op()) {
        case trace::GraphOp::CAPTURE_BEGIN:
          // Relaxed: the recorded run already kept to its capture mode, and what it did during
          // the capture (an allocator's own allocation, say) is replayed as calls of its own.
          check(shim::streamBeginCapture(stream(op.stream(), e), shim::CaptureMode::Relaxed), e, "streamBeginCapture");
          return;
        case trace::GraphOp::CAPTURE_END: {
          shim::Graph g = nullptr;
          check(shim::streamEndCapture(stream(op.stream(), e), &g), e, "streamEndCapture");
          graphs_[op.graph()] = g;
          return;
        }
        case trace::GraphOp::LAUNCH: {
          auto it = graphs_.find(op.graph());
          if (it == graphs_.end())
            throw trace::TraceError(path_ + ": record " + std::to_string(record_) + ": graph " +
                              std::to_string(op.graph()) + " was captured before the recording started; "
                              "its nodes are not in the trace, so it cannot be replayed: start the recording "
                              "before the capture (or record the whole run with CARDSIM_TRACE)");
          check(shim::graphLaunch(it->second, stream(op.stream(), e)), e, "graphLaunch");
          return;
        }
        case trace::GraphOp::DESTROY: {
          auto it = graphs_.find(op.graph());
          if (it == graphs_.end()) return;
          check(shim::graphDestroy(it->second), e, "graphDestroy");
          graphs_.erase(it);
          return;
        }
        default: return;
      }
    }
    case trace::Envelope::kCollective: {
      const trace::Collective& c = e.collective();
      if (c.pretimed()) {
        check(shim::launchCollective(stream(c.stream(), e), c.op(), c.seconds()), e, "launchCollective");
        return;
      }
      shim::CollectiveDesc d;
      d.op = c.op();
      d.bytes = c.bytes();
      d.ranks.assign(c.ranks().begin(), c.ranks().end());
      d.root = c.root();
      d.peer = c.peer();
      d.algorithm = c.algorithm();
      d.group = c.group();
      d.timeout_s = options_.collective_timeout_s;
      d.tag = c.tag();
      d.dtype = c.dtype();   // carried on into the replay's own trace
      d.send_bytes.assign(c.send_bytes().begin(), c.send_bytes().end());
      d.recv_bytes.assign(c.recv_bytes().begin(), c.recv_bytes().end());
      // Replicated ranks time their transfers alone: the other side is not replayed.
      if (options_.scale_ranks <= 0) {
        d.p2p = static_cast<shim::CollectiveDesc::PointToPoint>(c.p2p());
        if (c.posted_event() != 0) d.posted = event(c.posted_event(), e);
      }
      if (options_.scale_ranks > 0) {
        d.peers_late_ps = peersLatePs(e);
        bool world = static_cast<int>(d.ranks.size()) == world_;
        for (int i = 0; world && i < world_; ++i) world = d.ranks[static_cast<std::size_t>(i)] == i;
        if (world) {
          d.ranks.resize(static_cast<std::size_t>(options_.scale_ranks));
          for (int i = 0; i < options_.scale_ranks; ++i) d.ranks[static_cast<std::size_t>(i)] = i;
          d.group.clear();
          // The recorded split is the recorded world's: the replicated exchange is taken
          // as even, each rank sending its recorded buffer.
          d.send_bytes.clear();
          d.recv_bytes.clear();
        }
        // A transfer or a group's collective naming a rank the job of that many ranks does
        // not have (fewer than recorded): the input asks for a job this recording cannot
        // stand for.
        const std::size_t n = d.ranks.size();
        const bool outside = std::any_of(d.ranks.begin(), d.ranks.end(), [&](int r) { return r >= options_.scale_ranks; });
        const std::string at = "--ranks " + std::to_string(options_.scale_ranks) + ": " + path_ + ": record " +
                               std::to_string(record_) + " (call " + std::to_string(e.call()) + ")";
        if (d.op == "send_recv" && (outside || static_cast<std::size_t>(std::max(d.root, 0)) >= n ||
                                    static_cast<std::size_t>(std::max(d.peer, 0)) >= n))
          throw trace::TraceError(at + " is a point-to-point transfer between ranks " + std::to_string(c.ranks(0)) +
                                  " and " + std::to_string(c.ranks(c.ranks_size() - 1)) + ", which a job of " +
                                  std::to_string(options_.scale_ranks) + " rank(s) does not have; replicate to " +
                                  std::to_string(std::max(2, *std::max_element(d.ranks.begin(), d.ranks.end()) + 1)) +
                                  " ranks or more");
        if (outside)
          throw trace::TraceError(at + " is a " + c.op() + " of process group [" + joinRanks(d.ranks) +
                                  "], whose ranks a job of " + std::to_string(options_.scale_ranks) +
                                  " rank(s) does not all have; replicate to " +
                                  std::to_string(*std::max_element(d.ranks.begin(), d.ranks.end()) + 1) + " ranks or more");
      }
      double seconds = 0;
      std::string algorithm;
      check(shim::launchFabricCollective(stream(c.stream(), e), d, &seconds, &algorithm), e,
            ("collective " + c.op()).c_str());
      return;
    }
    case trace::Envelope::kApi: {
      const trace::ApiCall& a = e.api();
      switch (a.api()) {
        case trace::ApiCall::SET_DEVICE:   // replayed as recorded, current or not (a call the host paid for)
          useDevice(static_cast<int>(a.arg()), e, true);
          return;
        case trace::ApiCall::DEVICE_SYNCHRONIZE: check(shim::deviceSynchronize(), e, "deviceSynchronize"); return;
        case trace::ApiCall::MEM_GET_INFO: {
          std::size_t f = 0, t = 0;
          (void)shim::memGetInfo(&f, &t);
          return;
        }
        case trace::ApiCall::HOST_FUNC:
          check(shim::launchHostFunc(stream(static_cast<uint32_t>(a.arg()), e), [] {}), e, "launchHostFunc");
          return;
        default: return;
      }
    }
    default:
      return;   // header, names, device commands, kinds of a newer minor version
  }
}

}  // namespace cardsim::replay
