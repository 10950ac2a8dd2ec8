#include "AsyncChecker.h"

#include <algorithm>

namespace cardsim::shim {

namespace {
thread_local uint64_t t_site = 0;
}  // namespace

uint64_t checkCurrentSite() { return t_site; }
void checkSetSite(uint64_t site) { t_site = site; }

const char* checkKindName(CheckReport::Kind k) {
  switch (k) {
    case CheckReport::Kind::StreamRace: return "stream race";
    case CheckReport::Kind::FreedReuse: return "freed block reused";
    case CheckReport::Kind::GraphReplay: return "graph replay race";
    case CheckReport::Kind::HostRead: return "host read before copy completed";
    case CheckReport::Kind::HostWrite: return "host write before copy completed";
  }
  return "?";
}

uint64_t VectorClock::get(StreamKey k) const {
  for (const auto& [key, e] : entries_)
    if (key == k) return e;
  return 0;
}

void VectorClock::set(StreamKey k, uint64_t epoch) {
  for (auto& [key, e] : entries_)
    if (key == k) {
      e = epoch;
      return;
    }
  entries_.emplace_back(k, epoch);
}

void VectorClock::join(const VectorClock& other) {
  for (const auto& [key, e] : other.entries_)
    if (e > get(key)) set(key, e);
}

namespace {
// Past this many segments created since the last sweep, accesses the host has seen complete
// are dropped (they are ordered before everything queued from now on).
constexpr std::size_t kSweepEvery = 1 << 14;
constexpr std::size_t kMaxReadsPerSegment = 16;
constexpr std::size_t kMaxPendingReports = 4096;
}  // namespace

AsyncChecker::StreamState& AsyncChecker::stream(const StreamRef& s) {
  auto [it, fresh] = streams_.try_emplace(s.key);
  if (fresh) it->second.device = s.device;
  return it->second;
}

AsyncChecker::Access AsyncChecker::submit(const StreamRef& s, bool write, uint64_t site) {
  StreamState& st = stream(s);
  st.clock.join(host_);
  st.clock.set(s.key, ++st.epoch);
  Access a;
  a.stream = s.key;
  a.epoch = st.epoch;
  a.site = site;
  a.stream_id = s.id;
  a.device = s.device;
  a.write = write;
  return a;
}

void AsyncChecker::access(Shadow& m, uintptr_t lo, uintptr_t hi, const Access& a, const VectorClock& clock,
                          int memory_device) {
  if (hi <= lo) return;
  // Split the segments that straddle either end, so that the range is whole segments.
  auto split = [&m](uintptr_t at) {
    auto it = m.upper_bound(at);
    if (it == m.begin()) return;
    --it;
    if (it->first < at && at < it->second.end) {
      Segment right = it->second;
      it->second.end = at;
      m.emplace(at, std::move(right));
    }
  };
  split(lo);
  split(hi);
  auto ordered = [&](const Access& p) { return p.stream == a.stream || clock.get(p.stream) >= p.epoch; };
  auto report = [&](const Access& p, uintptr_t from, uintptr_t to) {
    // One report per earlier access and call: adjacent segments extend it.
    for (auto it = reports_.rbegin(); it != reports_.rend() && it->offender.site == a.site; ++it)
      if (it->producer.site == p.site && it->producer.stream_id == p.stream_id &&
          it->producer.write == p.write && it->address + it->bytes == from) {
        it->bytes = to - it->address;
        return;
      }
    if (reports_.size() >= kMaxPendingReports) return;
    CheckReport r;
    if (a.stream == 0) r.kind = p.write ? CheckReport::Kind::HostRead : CheckReport::Kind::HostWrite;
    else if (p.graph || a.graph) r.kind = CheckReport::Kind::GraphReplay;
    else if (p.freed) r.kind = CheckReport::Kind::FreedReuse;
    else r.kind = CheckReport::Kind::StreamRace;
    r.address = from;
    r.bytes = to - from;
    r.memory_device = memory_device;
    auto side = [](const Access& x) {
      CheckReport::Side s;
      s.site = x.site;
      s.host = x.stream == 0;
      s.stream_id = x.stream_id;
      s.device = x.device;
      s.write = x.write;
      s.graph = x.graph;
      return s;
    };
    r.producer = side(p);
    r.offender = side(a);
    reports_.push_back(r);
  };
  uintptr_t cur = lo;
  auto it = m.lower_bound(lo);
  while (cur < hi) {
    if (it == m.end() || it->first > cur) {   // a gap: nothing recorded there yet
      const uintptr_t end = it == m.end() ? hi : std::min(hi, it->first);
      if (a.stream != 0) {
        Segment g;
        g.end = end;
        if (a.write) g.write = a;
        else g.reads.push_back(a);
        m.emplace_hint(it, cur, std::move(g));
        ++since_sweep_;
      }
      cur = end;
      continue;
    }
    Segment& seg = it->second;
    const uintptr_t from = it->first, to = seg.end;
    if (seg.write && !ordered(*seg.write)) {
      report(*seg.write, from, to);
      seg.write.reset();   // reported once
    }
    if (a.write) {
      for (const Access& r : seg.reads)
        if (!ordered(r)) report(r, from, to);
    }
    if (a.stream != 0) {   // the host's own accesses are checked, not kept
      if (a.write) {
        seg.write = a;
        seg.reads.clear();
      } else {
        auto same = std::find_if(seg.reads.begin(), seg.reads.end(),
                                 [&](const Access& r) { return r.stream == a.stream; });
        if (same != seg.reads.end()) *same = a;
        else if (seg.reads.size() < kMaxReadsPerSegment) seg.reads.push_back(a);
        else seg.reads.front() = a;
      }
    }
    cur = to;
    ++it;
  }
  if (since_sweep_ >= kSweepEvery) sweep();
}

void AsyncChecker::sweep() {
  since_sweep_ = 0;
  auto done = [this](const Access& a) { return host_.get(a.stream) >= a.epoch; };
  for (Shadow* m : {&device_, &host_memory_})
    for (auto it = m->begin(); it != m->end();) {
      Segment& s = it->second;
      if (s.write && done(*s.write)) s.write.reset();
      s.reads.erase(std::remove_if(s.reads.begin(), s.reads.end(), done), s.reads.end());
      it = !s.write && s.reads.empty() ? m->erase(it) : std::next(it);
    }
}

void AsyncChecker::deviceAccess(const StreamRef& s, uintptr_t lo, std::size_t bytes, bool write, uint64_t site) {
  std::lock_guard<std::mutex> lock(mutex_);
  StreamState& st = stream(s);
  if (st.capture) {   // part of a graph: checked when it is replayed
    captures_[st.capture].push_back(CapturedAccess{lo, bytes, write, site});
    return;
  }
  const Access a = submit(s, write, site);
  access(device_, lo, lo + bytes, a, streams_[s.key].clock, s.device);
}

void AsyncChecker::hostAccess(uintptr_t lo, std::size_t bytes, bool write, uint64_t site) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (host_memory_.empty()) return;
  Access a;
  a.site = site;
  a.write = write;
  access(host_memory_, lo, lo + bytes, a, host_, -1);
}

void AsyncChecker::blockFreed(uintptr_t lo, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uintptr_t hi = lo + bytes;
  for (auto it = device_.lower_bound(lo); it != device_.end() && it->first < hi; ++it) {
    if (it->second.write) it->second.write->freed = true;
    for (Access& r : it->second.reads) r.freed = true;
  }
  // A segment that starts before `lo` but reaches into it belongs to another block (blocks do
  // not overlap), so only segments starting inside the block are marked.
}

void AsyncChecker::copyQueued(const StreamRef& s, void* dst, const void* src, std::size_t bytes, MemcpyKind kind,
                              bool async) {
  std::lock_guard<std::mutex> lock(mutex_);
  StreamState& st = stream(s);
  if (st.capture) {
    const bool dst_dev = kind == MemcpyKind::HostToDevice || kind == MemcpyKind::DeviceToDevice;
    const bool src_dev = kind == MemcpyKind::DeviceToHost || kind == MemcpyKind::DeviceToDevice;
    if (src_dev) captures_[st.capture].push_back({reinterpret_cast<uintptr_t>(src), bytes, false, 0});
    if (dst_dev) captures_[st.capture].push_back({reinterpret_cast<uintptr_t>(dst), bytes, true, 0});
    return;
  }
  const uint64_t site = checkCurrentSite();
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst), sr = reinterpret_cast<uintptr_t>(src);
  Access rd = submit(s, false, site);
  Access wr = rd;
  wr.write = true;
  const VectorClock& clock = streams_[s.key].clock;
  const int dev = s.device;
  switch (kind) {
    case MemcpyKind::HostToDevice:
      if (async) access(host_memory_, sr, sr + bytes, rd, clock, -1);
      access(device_, d, d + bytes, wr, clock, dev);
      break;
    case MemcpyKind::DeviceToHost:
      access(device_, sr, sr + bytes, rd, clock, dev);
      if (async) access(host_memory_, d, d + bytes, wr, clock, -1);
      break;
    case MemcpyKind::DeviceToDevice:
      access(device_, sr, sr + bytes, rd, clock, dev);
      access(device_, d, d + bytes, wr, clock, dev);
      break;
    default:
      break;
  }
  if (!async) host_.join(streams_[s.key].clock);   // the host waited for it
}

void AsyncChecker::memsetQueued(const StreamRef& s, void* ptr, std::size_t bytes, bool async) {
  std::lock_guard<std::mutex> lock(mutex_);
  StreamState& st = stream(s);
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  if (st.capture) {
    captures_[st.capture].push_back({p, bytes, true, 0});
    return;
  }
  const Access a = submit(s, true, checkCurrentSite());
  access(device_, p, p + bytes, a, streams_[s.key].clock, s.device);
  if (!async) host_.join(streams_[s.key].clock);
}

void AsyncChecker::eventRecorded(Event e, const StreamRef& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  StreamState& st = stream(s);
  EventState& ev = events_[e];
  if (st.capture) {
    ev.capture = st.capture;
    return;
  }
  st.clock.join(host_);
  ev.clock = st.clock;
  ev.capture = 0;
}

void AsyncChecker::streamWaited(const StreamRef& s, Event e) {
  std::lock_guard<std::mutex> lock(mutex_);
  StreamState& st = stream(s);
  auto it = events_.find(e);
  if (it == events_.end()) return;
  if (it->second.capture) {   // a side stream joins the capture (fork)
    if (!st.capture) st.capture = it->second.capture;
    return;
  }
  if (st.capture) return;
  st.clock.join(host_);
  st.clock.join(it->second.clock);
}

void AsyncChecker::hostWaitedEvent(Event e) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = events_.find(e);
  if (it != events_.end() && !it->second.capture) host_.join(it->second.clock);
}

void AsyncChecker::hostWaitedStream(const StreamRef& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  StreamState& st = stream(s);
  if (!st.capture) host_.join(st.clock);
}

void AsyncChecker::hostWaitedDevice(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [key, st] : streams_)
    if (st.device == device && !st.capture) host_.join(st.clock);
  sweep();
}

void AsyncChecker::eventDestroyed(Event e) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.erase(e);
}

void AsyncChecker::captureBegun(const StreamRef& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  StreamState& st = stream(s);
  st.capture = next_capture_++;
  captures_[st.capture];
}

void AsyncChecker::captureEnded(const StreamRef& s, Graph g) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t c = stream(s).capture;
  if (!c) return;
  for (auto& [key, st] : streams_)
    if (st.capture == c) st.capture = 0;
  for (auto& [e, ev] : events_)
    if (ev.capture == c) ev.capture = 0;
  if (g) graphs_[g] = {next_graph_++, std::move(captures_[c])};
  captures_.erase(c);
}

void AsyncChecker::graphLaunched(Graph g, const StreamRef& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = graphs_.find(g);
  if (it == graphs_.end() || stream(s).capture) return;
  const uint64_t site = checkCurrentSite();
  Access a = submit(s, false, site);
  a.graph = it->second.first;
  const VectorClock& clock = streams_[s.key].clock;
  for (const CapturedAccess& c : it->second.second) {
    a.write = c.write;
    access(device_, c.lo, c.lo + c.bytes, a, clock, s.device);
  }
}

void AsyncChecker::graphDestroyed(Graph g) {
  std::lock_guard<std::mutex> lock(mutex_);
  graphs_.erase(g);
}

std::vector<CheckReport> AsyncChecker::drain() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<CheckReport> out;
  out.swap(reports_);
  return out;
}

std::size_t AsyncChecker::pendingReports() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reports_.size();
}

void AsyncChecker::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  host_ = VectorClock();
  streams_.clear();
  events_.clear();
  captures_.clear();
  graphs_.clear();
  device_.clear();
  host_memory_.clear();
  reports_.clear();
  since_sweep_ = 0;
}

}  // namespace cardsim::shim
