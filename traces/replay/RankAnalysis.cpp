#include "traces/replay/RankAnalysis.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <type_traits>

#include "simulator/Config.h"
#include "simulator/proto/config.pb.h"
#include "traces/lib/TraceReader.h"
#include "traces/replay/GraphKernels.h"

namespace cardsim::replay {

namespace {

enum Category { kCompute = 0, kMemory, kCopies, kComm, kCategories };

struct Interval {
  uint64_t begin, end;
  Category category;
};

struct KernelShape {
  model::KernelClass kernel_class;
  model::DType dtype;
  double bytes;
  double flops;
  uint32_t tiles;   // as recorded (0: the model cuts it)
};

// Whether the roofline puts the kernel on the memory side on this device.
bool memoryBound(const model::DeviceParams& p, const KernelShape& k) {
  const double peak = model::peakFor(p.compute, k.kernel_class, k.dtype) *
                      std::max(p.compute.efficiency[static_cast<std::size_t>(k.kernel_class)], 1e-9);
  const double compute_s = peak > 0 ? k.flops / peak : 0;
  // What a kernel on every cluster can draw: the memory's bandwidth, or the clusters' ports.
  double bw = p.memory.bandwidth_bytes_per_s;
  if (p.memory.cluster_bandwidth_bytes_per_s > 0)
    bw = std::min(bw, p.memory.cluster_bandwidth_bytes_per_s * std::max<uint32_t>(1, p.compute.clusters));
  const double memory_s = bw > 0 ? k.bytes / bw : 0;
  return memory_s > compute_s;
}

// Splits [first, last) by what runs (see the header); `intervals` may overlap freely.
Breakdown split(const std::vector<Interval>& intervals, uint64_t first, uint64_t last) {
  Breakdown b;
  b.total_us = last > first ? (last - first) / 1e6 : 0;
  struct Edge {
    uint64_t t;
    int delta;
    Category c;
  };
  std::vector<Edge> edges;
  edges.reserve(intervals.size() * 2);
  for (const Interval& i : intervals) {
    const uint64_t a = std::max(i.begin, first), z = std::min(i.end, last);
    if (z <= a) continue;
    edges.push_back({a, +1, i.category});
    edges.push_back({z, -1, i.category});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& x, const Edge& y) { return x.t < y.t; });
  int active[kCategories] = {0, 0, 0, 0};
  double ps[kCategories + 1] = {0, 0, 0, 0, 0};   // exclusive time per category, then idle
  double comm_ps = 0;
  uint64_t t = first;
  for (std::size_t i = 0; i <= edges.size(); ++i) {
    const uint64_t next = i < edges.size() ? edges[i].t : last;
    if (next > t) {
      const double d = static_cast<double>(next - t);
      int c = 0;
      while (c < kCategories && active[c] == 0) ++c;
      ps[c] += d;
      if (active[kComm] > 0) comm_ps += d;
      t = next;
    }
    if (i < edges.size()) active[edges[i].c] += edges[i].delta;
  }
  b.compute_us = ps[kCompute] / 1e6;
  b.memory_bound_us = ps[kMemory] / 1e6;
  b.copies_us = ps[kCopies] / 1e6;
  b.exposed_communication_us = ps[kComm] / 1e6;
  b.idle_us = ps[kCategories] / 1e6;
  b.communication_us = comm_ps / 1e6;
  return b;
}

// Length of the union of [begin, end) intervals.
double unionPs(std::vector<std::pair<uint64_t, uint64_t>> v) {
  std::sort(v.begin(), v.end());
  double total = 0;
  uint64_t a = 0, z = 0;
  bool open = false;
  for (const auto& [b, e] : v) {
    if (open && b <= z) {
      z = std::max(z, e);
      continue;
    }
    if (open) total += static_cast<double>(z - a);
    a = b;
    z = e;
    open = true;
  }
  if (open) total += static_cast<double>(z - a);
  return total;
}

}  // namespace

struct RankAnalyzer::State {
  std::string file;
  RankPass pass;
  model::DeviceParams params;
  bool have_params = false;
  CallTable<KernelShape> launches;
  GraphKernels<KernelShape> graph_kernels;   // a launched graph's kernels, from its capture
  std::unordered_map<uint32_t, uint32_t> names;         // recorded id -> RankData::names
  std::unordered_map<std::string, uint32_t> groups;     // key -> RankData::groups
  uint64_t last_host = 0;
};

RankAnalyzer::RankAnalyzer(int rank, std::string file) : s_(std::make_unique<State>()) {
  s_->file = std::move(file);
  s_->pass.rr.rank = rank;
  s_->pass.rr.file = s_->file;
  s_->pass.rd.rank = rank;
}

RankAnalyzer::~RankAnalyzer() = default;

void RankAnalyzer::header(const trace::Header& h) {
  State& s = *s_;
  s.pass.preset = h.preset();
  s.pass.device_name = h.device_name();
  s.pass.world_size = h.world_size();
  try {
    s.params = sim::toDeviceParams(sim::parsePresetText(h.config_text(), s.file + " (header config)"), s.file);
    s.have_params = true;
  } catch (const std::exception&) {
    // a trace from another backend without a preset: every kernel counts as compute
  }
}

void RankAnalyzer::reserveFor(const std::string& trace_file) {
  struct stat st {};
  if (::stat(trace_file.c_str(), &st) != 0 || st.st_size <= 0) return;
  // A record takes 30-60 bytes uncompressed; about a third are device commands. Generous:
  // room left over is address space only. (A compressed trace is underestimated: the
  // tables then grow as they would without the hint.)
  const auto bytes = static_cast<std::size_t>(st.st_size);
  const std::size_t calls = bytes / 24, commands = bytes / 48;
  RankData& rd = s_->pass.rd;
  rd.calls.reserve(calls);
  rd.host_waits.reserve(calls / 2);
  rd.cmds.reserve(commands);
  s_->launches.reserve(commands);
}

void RankAnalyzer::record(const trace::Envelope& e) {
  State& s = *s_;
  RankData& rd = s.pass.rd;
  if (e.record_case() == trace::Envelope::kName) {
    s.names[e.name().id()] = static_cast<uint32_t>(rd.names.size());
    rd.names.push_back(e.name().text());
    return;
  }
  if (e.record_case() == trace::Envelope::kCommand) {
    const trace::DeviceCommand& c = e.command();
    auto n = s.names.find(c.name());
    Cmd cmd{c.kind(), c.device(), c.stream(), n == s.names.end() ? 0u : n->second, c.ready_ps(), c.start_ps(),
            c.end_ps(), c.call(), static_cast<double>(c.bytes())};
    if (c.kind() == trace::DeviceCommand::KERNEL) {
      const KernelShape* it = s.launches.find(c.call());
      if (!it) it = s.graph_kernels.find(c.call(), c.name(), c.ready_ps());
      cmd.memory_bound = s.have_params && it && memoryBound(s.params, *it);
      // The clusters it holds: one per tile, at most all of them (while it waits for
      // clusters others hold it holds fewer, which this does not see).
      cmd.clusters = s.have_params ? s.params.compute.clusters : 0;
      if (s.have_params && it)
        cmd.clusters = std::min(s.params.compute.clusters,
                                model::kernelTiles(s.params.compute, it->kernel_class, it->dtype,
                                                   it->flops, it->bytes, it->tiles));
      if (it) cmd.bytes = it->bytes;
    }
    rd.cmds.push_back(std::move(cmd));
    return;
  }
  if (e.call() == 0) return;
  ++s.pass.rr.calls;
  Call call;
  call.begin = e.host_begin_ps();
  call.end = e.host_end_ps();
  if (!trace::movesClockOnly(e)) rd.first_host = std::min(rd.first_host, e.host_begin_ps());
  s.last_host = std::max(s.last_host, e.host_end_ps());
  // Calls in which the host waits for the device: what it waited for bounds what follows.
  const bool blocks =
      (e.record_case() == trace::Envelope::kApi && e.api().api() == trace::ApiCall::DEVICE_SYNCHRONIZE) ||
      (e.record_case() == trace::Envelope::kStream && e.stream().op() == trace::StreamOp::SYNCHRONIZE) ||
      (e.record_case() == trace::Envelope::kEvent && e.event().op() == trace::EventOp::SYNCHRONIZE) ||
      (e.record_case() == trace::Envelope::kMemcpy && !e.memcpy().async()) ||
      (e.record_case() == trace::Envelope::kMemset && !e.memset().async()) ||
      (e.record_case() == trace::Envelope::kFree && e.free().kind() == trace::MEMORY_DEVICE) ||
      // A barrier holds its caller until it completes (what it completes at, a walk of the
      // critical path finds inside the call; one that did not hold, before format 1.3, has none).
      (e.record_case() == trace::Envelope::kCollective && e.collective().op() == "barrier");
  if (blocks) rd.host_waits.emplace_back(e.host_end_ps(), e.host_begin_ps());
  if (e.record_case() == trace::Envelope::kKernel) {
    const trace::KernelLaunch& k = e.kernel();
    const KernelShape shape{static_cast<model::KernelClass>(k.kernel_class()), static_cast<model::DType>(k.dtype()),
                            k.bytes_read() + k.bytes_written(), k.flops(), k.tiles()};
    s.launches.add(e.call(), shape);
    if (e.status() == 0) s.graph_kernels.kernel(k.stream(), k.name(), shape);
  } else if (e.record_case() == trace::Envelope::kGraph) {
    if (e.status() == 0) s.graph_kernels.graph(e);
  } else if (e.record_case() == trace::Envelope::kEvent) {
    call.is_event = true;
    call.event = e.event().event();
    call.event_op = e.event().op();
    if (call.event_op == trace::EventOp::RECORD) rd.event_records[call.event].push_back(e.call());
  } else if (e.record_case() == trace::Envelope::kCollective) {
    const trace::Collective& c = e.collective();
    call.alone_s = c.seconds();
    std::string group = c.group();
    if (group.empty())
      for (int m : c.ranks()) group += std::to_string(m) + ",";
    auto [it, fresh] = s.groups.emplace(group, static_cast<uint32_t>(rd.groups.size()));
    if (fresh) rd.groups.push_back(group);
    call.group = it->second;
    if (!c.pretimed())
      s.pass.collectives.push_back(CollectiveCall{c.op(), c.algorithm_used(), static_cast<double>(c.bytes()),
                                                  std::vector<int>(c.ranks().begin(), c.ranks().end()),
                                                  static_cast<uint32_t>(c.root()), static_cast<uint32_t>(c.peer())});
  }
  rd.calls.add(e.call(), std::move(call));
}

RankPass RankAnalyzer::finish() {
  State& s = *s_;
  RankPass& pass = s.pass;
  RankData& rd = pass.rd;
  RankReport& rr = pass.rr;
  const model::DeviceParams& params = s.params;
  const bool have_params = s.have_params;
  uint64_t first = rd.first_host, last = 0;
  if (first == std::numeric_limits<uint64_t>::max()) first = 0;
  std::vector<Interval> intervals;
  std::map<int, std::vector<std::pair<uint64_t, uint64_t>>> busy_compute, busy_dma, busy_fabric;
  // Per device: (time, clusters taken (+) or given back (-)) by kernels; concurrent kernels
  // together hold at most all the clusters.
  std::map<int, std::vector<std::pair<uint64_t, int64_t>>> cluster_steps;
  std::map<int, double> memory_bytes;
  for (const Cmd& c : rd.cmds) {
    last = std::max(last, c.end);
    Category cat;
    switch (c.kind) {
      case trace::DeviceCommand::KERNEL: {
        cat = c.memory_bound ? kMemory : kCompute;
        busy_compute[c.device].emplace_back(c.start, c.end);
        cluster_steps[c.device].emplace_back(c.start, c.clusters);
        cluster_steps[c.device].emplace_back(c.end, -static_cast<int64_t>(c.clusters));
        memory_bytes[c.device] += c.bytes;
        break;
      }
      case trace::DeviceCommand::MEMSET:
      case trace::DeviceCommand::MEMCPY_DTOD:
        cat = kMemory;
        memory_bytes[c.device] += c.bytes * (c.kind == trace::DeviceCommand::MEMCPY_DTOD ? 2 : 1);
        break;
      case trace::DeviceCommand::MEMCPY_HTOD:
      case trace::DeviceCommand::MEMCPY_DTOH:
      case trace::DeviceCommand::MEMCPY_PEER:
        cat = kCopies;
        busy_dma[c.device].emplace_back(c.start, c.end);
        break;
      case trace::DeviceCommand::COLLECTIVE:
        if (rd.name(c).rfind(kComputeStepPrefix, 0) == 0) {
          cat = kCompute;   // computation known only by its duration (a Chakra node)
          busy_compute[c.device].emplace_back(c.start, c.end);
          if (have_params) {
            cluster_steps[c.device].emplace_back(c.start, params.compute.clusters);
            cluster_steps[c.device].emplace_back(c.end, -static_cast<int64_t>(params.compute.clusters));
          }
          break;
        }
        cat = kComm;
        busy_fabric[c.device].emplace_back(c.start, c.end);
        break;
      default: continue;   // event records and waits take no time of their own
    }
    if (c.end > c.start) intervals.push_back({c.start, c.end, cat});
  }
  std::sort(rd.host_waits.begin(), rd.host_waits.end());
  rr.device_commands = rd.cmds.size();
  if (rd.cmds.empty()) last = s.last_host;
  rr.breakdown = split(intervals, first, last);
  const double span = last > first ? static_cast<double>(last - first) : 0;
  std::map<int, bool> devices;
  for (const Cmd& c : rd.cmds) devices[c.device] = true;
  for (const auto& [dev, _] : devices) {
    Utilization u;
    u.device = dev;
    if (span > 0) {
      u.compute = unionPs(busy_compute[dev]) / span;
      if (have_params && params.compute.clusters > 0) {
        auto& steps = cluster_steps[dev];
        std::sort(steps.begin(), steps.end());
        const int64_t all = params.compute.clusters;
        double held_ps = 0;   // cluster x ps
        int64_t held = 0;
        for (std::size_t i = 0; i < steps.size(); ++i) {
          if (i > 0) held_ps += static_cast<double>(steps[i].first - steps[i - 1].first) * std::min(held, all);
          held += steps[i].second;
        }
        u.clusters = std::min(1.0, held_ps / (span * static_cast<double>(all)));
      }
      u.dma = unionPs(busy_dma[dev]) / span;
      u.fabric = unionPs(busy_fabric[dev]) / span;
      if (have_params && params.memory.bandwidth_bytes_per_s > 0)
        u.memory_bandwidth = memory_bytes[dev] / (params.memory.bandwidth_bytes_per_s * span * 1e-12);
    }
    rr.utilization.push_back(u);
  }
  // Only the calls of commands matter from here on (the critical path looks them up).
  rd.calls.settle();
  std::vector<uint64_t> used;
  used.reserve(rd.cmds.size());
  for (const Cmd& c : rd.cmds) used.push_back(c.call);
  std::sort(used.begin(), used.end());
  CallTable<Call> kept;
  kept.reserve(used.size());
  for (auto& [number, call] : rd.calls.items())
    if (std::binary_search(used.begin(), used.end(), number)) kept.add(number, std::move(call));
  rd.calls = std::move(kept);
  pass.first = first;
  pass.last = last;
  return std::move(s.pass);
}

void buildIndex(RankData& rd) {
  if (rd.indexed) return;
  rd.indexed = true;
  std::map<std::string, uint64_t> group_counts;
  rd.calls.settle();
  rd.by_end.reserve(rd.cmds.size());
  std::vector<std::pair<uint64_t, std::size_t>> of_call;
  of_call.reserve(rd.cmds.size());
  for (std::size_t i = 0; i < rd.cmds.size(); ++i) {
    const Cmd& c = rd.cmds[i];
    of_call.emplace_back(c.call, i);
    rd.streams[{c.device, c.stream}].push_back(i);
    rd.by_end.emplace_back(c.end, i);
    if (c.kind == trace::DeviceCommand::COLLECTIVE && rd.name(c).rfind(kComputeStepPrefix, 0) != 0) {
      const Call* call = rd.calls.find(c.call);
      const std::string& group = rd.groups[call ? call->group : 0];
      const std::pair<std::string, uint64_t> key{group, group_counts[group]++};
      rd.collectives[key] = i;
      rd.collective_key[i] = key;
    }
  }
  // A stream runs its commands in order, so these lists, the calls and the ends come sorted
  // (or nearly): a sort only where they are not.
  auto sortUnlessSorted = [](auto& v, auto less) {
    if (!std::is_sorted(v.begin(), v.end(), less)) std::stable_sort(v.begin(), v.end(), less);
  };
  for (auto& [key, list] : rd.streams)
    sortUnlessSorted(list, [&](std::size_t a, std::size_t b) { return rd.cmds[a].start < rd.cmds[b].start; });
  rd.stream_pos.assign(rd.cmds.size(), 0);
  for (const auto& [key, list] : rd.streams)
    for (std::size_t p = 0; p < list.size(); ++p) rd.stream_pos[list[p]] = p;
  // The last command of each call: commands in order, so the table keeps the last.
  sortUnlessSorted(of_call, [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [call, i] : of_call) rd.cmd_of_call.add(call, i);   // sorted: no settling needed
  rd.cmd_of_call.settle();
  sortUnlessSorted(rd.by_end, std::less<>());   // (end, command): no two alike, so stable or not is one order
}

void inParallel(std::size_t n, const std::function<void(std::size_t)>& fn) {
  std::vector<std::exception_ptr> errors(n);
  const std::size_t workers = std::max<std::size_t>(1, std::min<std::size_t>(n, std::thread::hardware_concurrency()));
  auto work = [&](std::size_t w) {
    for (std::size_t i = w; i < n; i += workers) {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t w = 1; w < workers; ++w) threads.emplace_back(work, w);
  work(0);
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

RankPass readRank(int rank, const std::string& path) {
  trace::TraceReader reader(path);
  RankAnalyzer analyzer(rank, path);
  analyzer.header(reader.header());
  analyzer.reserveFor(path);
  while (const trace::Envelope* e = reader.next()) analyzer.record(*e);
  return analyzer.finish();
}

// ---- the binary form ---------------------------------------------------------------------

namespace {

// Plain data, bytes and all (std::pair of plain members is not trivially copyable only for
// its assignment operator, which copying bytes does not use).
template <typename T>
constexpr bool isPlain() {
  return std::is_trivially_copy_constructible_v<T> && std::is_trivially_destructible_v<T>;
}

class Out {
 public:
  explicit Out(std::size_t reserve) { s_.reserve(reserve); }
  template <typename T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    s_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& v) {
    pod<uint64_t>(v.size());
    s_.append(v);
  }
  // A vector of plain data as its count then its bytes (padding included: read back on the
  // same machine, into the same layout).
  template <typename T>
  void block(const std::vector<T>& v) {
    static_assert(isPlain<T>());
    pod<uint64_t>(v.size());
    s_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string take() { return std::move(s_); }

 private:
  std::string s_;
};

class In {
 public:
  In(std::string_view s, const std::string& what) : s_(s), what_(what) {}
  template <typename T>
  T pod() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    T v;
    std::memcpy(&v, s_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string str() {
    const uint64_t n = pod<uint64_t>();
    need(n);
    std::string v(s_.substr(at_, n));
    at_ += n;
    return v;
  }
  // A vector written by Out::block.
  template <typename T>
  void block(std::vector<T>* v) {
    static_assert(isPlain<T>());
    const uint64_t n = count(sizeof(T));
    v->resize(n);
    std::memcpy(static_cast<void*>(v->data()), s_.data() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
  }
  // A count of items at least `min_bytes` each: never more than the bytes left could hold.
  uint64_t count(std::size_t min_bytes) {
    const uint64_t n = pod<uint64_t>();
    if (n > (s_.size() - at_) / std::max<std::size_t>(min_bytes, 1)) fail();
    return n;
  }
  void end() const {
    if (at_ != s_.size()) throw std::runtime_error(what_ + ": " + std::to_string(s_.size() - at_) + " bytes too many");
  }

 private:
  void need(uint64_t n) const {
    if (n > s_.size() - at_) fail();
  }
  [[noreturn]] void fail() const {
    throw std::runtime_error(what_ + ": cut short at byte " + std::to_string(at_) + " of " + std::to_string(s_.size()));
  }
  std::string_view s_;
  std::string what_;
  std::size_t at_ = 0;
};

constexpr uint64_t kPassMagic = 0x3273736170736373ull;   // "cspass" and a version byte (2: vectors as blocks)

}  // namespace

std::string writePass(const RankPass& p) {
  Out o(4096 + 80 * p.rd.cmds.size() + 64 * p.rd.calls.items().size() + 48 * p.rd.names.size());
  o.pod(kPassMagic);
  o.str(p.preset);
  o.str(p.device_name);
  o.pod<int32_t>(p.world_size);
  o.pod(p.first);
  o.pod(p.last);
  const RankReport& rr = p.rr;
  o.pod<int32_t>(rr.rank);
  o.str(rr.file);
  o.pod(rr.breakdown);
  o.pod(rr.calls);
  o.pod(rr.device_commands);
  o.pod<uint64_t>(rr.utilization.size());
  for (const Utilization& u : rr.utilization) {
    o.pod<int32_t>(u.device);
    for (double v : {u.clusters, u.compute, u.memory_bandwidth, u.dma, u.fabric}) o.pod(v);
  }
  const RankData& rd = p.rd;
  o.pod<int32_t>(rd.rank);
  o.pod(rd.first_host);
  o.pod<uint64_t>(rd.names.size());
  for (const std::string& n : rd.names) o.str(n);
  o.pod<uint64_t>(rd.groups.size());
  for (const std::string& g : rd.groups) o.str(g);
  o.block(rd.cmds);
  o.block(rd.host_waits);
  o.block(rd.calls.items());
  o.pod<uint64_t>(rd.event_records.size());
  for (const auto& [event, calls] : rd.event_records) {
    o.pod(event);
    o.pod<uint64_t>(calls.size());
    for (uint64_t c : calls) o.pod(c);
  }
  o.pod<uint64_t>(p.collectives.size());
  for (const CollectiveCall& c : p.collectives) {
    o.str(c.op);
    o.str(c.algorithm);
    o.pod(c.bytes);
    o.pod<uint64_t>(c.ranks.size());
    for (int r : c.ranks) o.pod<int32_t>(r);
    o.pod(c.root);
    o.pod(c.peer);
  }
  return o.take();
}

RankPass readPass(std::string_view bytes, const std::string& what) {
  In in(bytes, what);
  if (in.pod<uint64_t>() != kPassMagic) throw std::runtime_error(what + ": not a rank's replay summary");
  RankPass p;
  p.preset = in.str();
  p.device_name = in.str();
  p.world_size = in.pod<int32_t>();
  p.first = in.pod<uint64_t>();
  p.last = in.pod<uint64_t>();
  RankReport& rr = p.rr;
  rr.rank = in.pod<int32_t>();
  rr.file = in.str();
  rr.breakdown = in.pod<Breakdown>();
  rr.calls = in.pod<uint64_t>();
  rr.device_commands = in.pod<uint64_t>();
  for (uint64_t n = in.count(44); n > 0; --n) {
    Utilization u;
    u.device = in.pod<int32_t>();
    for (double* v : {&u.clusters, &u.compute, &u.memory_bandwidth, &u.dma, &u.fabric}) *v = in.pod<double>();
    rr.utilization.push_back(u);
  }
  RankData& rd = p.rd;
  rd.rank = in.pod<int32_t>();
  rd.first_host = in.pod<uint64_t>();
  rd.names.clear();
  for (uint64_t n = in.count(8); n > 0; --n) rd.names.push_back(in.str());
  rd.groups.clear();
  for (uint64_t n = in.count(8); n > 0; --n) rd.groups.push_back(in.str());
  in.block(&rd.cmds);
  for (std::size_t n = 0; n < rd.cmds.size(); ++n) {
    const Cmd& c = rd.cmds[n];
    if (c.name >= rd.names.size()) throw std::runtime_error(what + ": command " + std::to_string(n) + " names name " +
                                                            std::to_string(c.name) + " of " + std::to_string(rd.names.size()));
    if (!trace::DeviceCommand::Kind_IsValid(c.kind))
      throw std::runtime_error(what + ": command " + std::to_string(n) + " has kind " + std::to_string(c.kind));
  }
  in.block(&rd.host_waits);
  in.block(&rd.calls.items());   // in the order written: by number, each once
  for (std::size_t n = 1; n < rd.calls.items().size(); ++n)
    if (rd.calls.items()[n - 1].first >= rd.calls.items()[n].first)
      throw std::runtime_error(what + ": call " + std::to_string(rd.calls.items()[n].first) + " out of order");
  for (const auto& [number, c] : rd.calls.items()) {
    if (c.group >= rd.groups.size()) throw std::runtime_error(what + ": call " + std::to_string(number) + " names group " +
                                                              std::to_string(c.group) + " of " + std::to_string(rd.groups.size()));
    if (c.is_event && !trace::EventOp::Op_IsValid(c.event_op))
      throw std::runtime_error(what + ": call " + std::to_string(number) + " has event op " + std::to_string(c.event_op));
  }
  for (uint64_t n = in.count(12); n > 0; --n) {
    const uint32_t event = in.pod<uint32_t>();
    std::vector<uint64_t>& list = rd.event_records[event];
    for (uint64_t k = in.count(8); k > 0; --k) list.push_back(in.pod<uint64_t>());
  }
  for (uint64_t n = in.count(40); n > 0; --n) {
    CollectiveCall c;
    c.op = in.str();
    c.algorithm = in.str();
    c.bytes = in.pod<double>();
    for (uint64_t k = in.count(4); k > 0; --k) c.ranks.push_back(in.pod<int32_t>());
    c.root = in.pod<uint32_t>();
    c.peer = in.pod<uint32_t>();
    p.collectives.push_back(std::move(c));
  }
  in.end();
  return p;
}

}  // namespace cardsim::replay
