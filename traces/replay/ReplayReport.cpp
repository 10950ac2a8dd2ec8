#include "traces/replay/ReplayReport.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <thread>
#include <unordered_map>

#include "simulator/Config.h"
#include "simulator/proto/config.pb.h"
#include "traces/lib/TraceReader.h"

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

struct Cmd {
  trace::DeviceCommand::Kind kind;
  int device;
  uint32_t stream;
  std::string name;
  uint64_t ready, start, end, call;
  double bytes;
  bool memory_bound = false;
  uint32_t clusters = 0;              // kernels: the clusters it holds
};

struct Call {
  uint64_t begin = 0, end = 0;
  uint32_t event = 0;                 // EventOp calls
  trace::EventOp::Op event_op = trace::EventOp::CREATE;
  bool is_event = false;
  double alone_s = -1;                // collectives: the model's time alone
  std::string group;                  // collectives: the group key (or its ranks)
};

struct RankData {
  int rank = 0;
  std::vector<Cmd> cmds;
  std::vector<std::pair<uint64_t, uint64_t>> host_waits;   // (end, begin) of calls that wait for the device
  std::unordered_map<uint64_t, Call> calls;
  std::unordered_map<uint64_t, std::size_t> cmd_of_call;        // the last command of a call
  std::map<std::pair<int, uint32_t>, std::vector<std::size_t>> streams;   // by start
  std::unordered_map<std::size_t, std::size_t> stream_pos;
  std::map<uint32_t, std::vector<uint64_t>> event_records;      // event -> RECORD calls
  std::vector<std::pair<uint64_t, std::size_t>> by_end;         // (end, cmd), sorted
  std::map<std::pair<std::string, uint64_t>, std::size_t> collectives;   // (group, n) -> cmd
  std::unordered_map<std::size_t, std::pair<std::string, uint64_t>> collective_key;
  uint64_t first_host = std::numeric_limits<uint64_t>::max();
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

std::string pathKind(trace::DeviceCommand::Kind k) {
  switch (k) {
    case trace::DeviceCommand::KERNEL: return "kernel";
    case trace::DeviceCommand::MEMSET: return "memset";
    case trace::DeviceCommand::COLLECTIVE: return "collective";
    case trace::DeviceCommand::EVENT_RECORD:
    case trace::DeviceCommand::EVENT_WAIT: return "wait";
    default: return "copy";
  }
}

CriticalPath criticalPath(const std::vector<RankData>& ranks) {
  CriticalPath cp;
  std::map<std::pair<std::string, std::string>, PathItem> items;
  auto add = [&](const std::string& kind, const std::string& name, uint64_t ps) {
    if (ps == 0) return;
    PathItem& it = items[{kind, name}];
    it.kind = kind;
    it.name = name;
    it.time_us += ps / 1e6;
    ++it.count;
    cp.by_kind[kind] += ps / 1e6;
    cp.total_us += ps / 1e6;
  };
  // Start at the last device completion of the run.
  int r = -1;
  std::size_t cur = 0;
  uint64_t best = 0;
  for (std::size_t i = 0; i < ranks.size(); ++i)
    if (!ranks[i].by_end.empty() && ranks[i].by_end.back().first >= best) {
      best = ranks[i].by_end.back().first;
      r = static_cast<int>(i);
      cur = ranks[i].by_end.back().second;
    }
  if (r < 0) return cp;
  uint64_t horizon = best;   // the path so far covers [horizon, end of run)
  std::size_t steps = 0, limit = 4;
  for (const auto& rd : ranks) limit += rd.cmds.size() * 2;
  while (steps++ < limit) {
    const RankData* rd = &ranks[static_cast<std::size_t>(r)];
    // A collective that took longer than its own time waited for a later member: follow it.
    if (rd->cmds[cur].kind == trace::DeviceCommand::COLLECTIVE) {
      auto key = rd->collective_key.find(cur);
      auto call = rd->calls.find(rd->cmds[cur].call);
      if (key != rd->collective_key.end() && call != rd->calls.end() && call->second.alone_s >= 0) {
        const Cmd& c = rd->cmds[cur];
        const uint64_t alone = static_cast<uint64_t>(call->second.alone_s * 1e12 + 0.5);
        if (c.end > c.start + alone + 1)
          for (std::size_t j = 0; j < ranks.size(); ++j) {
            auto other = ranks[j].collectives.find(key->second);
            if (other != ranks[j].collectives.end() && ranks[j].cmds[other->second].start > rd->cmds[cur].start) {
              r = static_cast<int>(j);
              cur = other->second;
              rd = &ranks[j];
            }
          }
      }
    }
    const Cmd& c = rd->cmds[cur];
    add(pathKind(c.kind), c.name, std::min(c.end, horizon) > c.start ? std::min(c.end, horizon) - c.start : 0);
    horizon = std::min(horizon, c.start);
    // What it waited for.
    uint64_t stream_end = 0, event_end = 0;
    std::size_t stream_prev = SIZE_MAX, event_prev = SIZE_MAX;
    {
      const auto& list = rd->streams.at({c.device, c.stream});
      const std::size_t pos = rd->stream_pos.at(cur);
      if (pos > 0) {
        stream_prev = list[pos - 1];
        stream_end = rd->cmds[stream_prev].end;
      }
    }
    if (c.kind == trace::DeviceCommand::EVENT_WAIT) {
      auto call = rd->calls.find(c.call);
      if (call != rd->calls.end() && call->second.is_event) {
        auto recs = rd->event_records.find(call->second.event);
        if (recs != rd->event_records.end()) {
          auto it = std::lower_bound(recs->second.begin(), recs->second.end(), c.call);
          if (it != recs->second.begin()) {
            auto cmd = rd->cmd_of_call.find(*(it - 1));
            if (cmd != rd->cmd_of_call.end()) {
              event_prev = cmd->second;
              event_end = rd->cmds[event_prev].end;
            }
          }
        }
      }
    }
    const uint64_t bound = std::max({stream_end, event_end, c.ready});
    if (c.start > bound + 1) {
      // Held by other work on the card (a busy queue, clusters or memory): the command on
      // this device that ended last before it could start.
      std::size_t blocker = SIZE_MAX;
      uint64_t end = 0;
      auto it = std::upper_bound(rd->by_end.begin(), rd->by_end.end(), std::make_pair(c.start, SIZE_MAX));
      while (it != rd->by_end.begin()) {
        --it;
        if (it->second != cur && rd->cmds[it->second].device == c.device && it->first > bound) {
          blocker = it->second;
          end = it->first;
          break;
        }
        if (it->first <= bound) break;
      }
      if (blocker != SIZE_MAX) {
        add("wait", "for the card", c.start > end ? c.start - end : 0);
        horizon = std::min(horizon, end);
        cur = blocker;
        continue;
      }
    }
    if (stream_prev != SIZE_MAX && stream_end >= bound) {
      cur = stream_prev;
      continue;
    }
    if (event_prev != SIZE_MAX && event_end >= bound) {
      cur = event_prev;
      continue;
    }
    // The host: it handed the command over at `ready`, after the device work it last
    // waited for: the last completion inside a call in which the host waited (a
    // synchronize, a synchronous copy, a free) that returned before this command's call
    // began; else the start of the run. Work that merely ended earlier did not hold it.
    auto call = rd->calls.find(c.call);
    const uint64_t since = call != rd->calls.end() ? call->second.begin : c.ready;
    std::size_t waited = SIZE_MAX;
    uint64_t waited_end = 0;
    for (auto w = std::upper_bound(rd->host_waits.begin(), rd->host_waits.end(), std::make_pair(since, UINT64_MAX));
         w != rd->host_waits.begin();) {
      --w;
      // the latest completion within [begin, end] of this wait
      auto it = std::upper_bound(rd->by_end.begin(), rd->by_end.end(), std::make_pair(w->first, SIZE_MAX));
      if (it != rd->by_end.begin() && std::prev(it)->first >= w->second) {
        waited = std::prev(it)->second;
        waited_end = std::prev(it)->first;
        break;
      }
    }
    if (waited == SIZE_MAX) {
      const uint64_t from = std::min(rd->first_host, c.ready);
      add("host", "host gap", std::min(c.ready, horizon) > from ? std::min(c.ready, horizon) - from : 0);
      break;
    }
    add("host", "host gap", std::min(c.ready, horizon) > waited_end ? std::min(c.ready, horizon) - waited_end : 0);
    horizon = std::min(horizon, waited_end);
    cur = waited;
  }
  for (auto& [k, v] : items) cp.items.push_back(v);
  std::sort(cp.items.begin(), cp.items.end(), [](const PathItem& a, const PathItem& b) {
    return a.time_us != b.time_us ? a.time_us > b.time_us : a.name < b.name;
  });
  return cp;
}


// What one rank's file gives, read on its own (ranks are read in parallel); the kernels'
// times are kept in command order so that the totals add up as a serial pass would.
struct RankPass {
  std::string preset, device_name;
  int world_size = 0;
  RankReport rr;
  RankData rd;
  struct KernelTime {
    const std::string* name;   // into rd.cmds
    double us, memory_ps;
  };
  std::vector<KernelTime> kernel_times;
  uint64_t first = 0, last = 0;
};

RankPass readRank(int rank, const std::string& path) {
  RankPass pass;
  {
    trace::TraceReader reader(path);
    const trace::Header& h = reader.header();
    pass.preset = h.preset();
    pass.device_name = h.device_name();
    pass.world_size = h.world_size();
    model::DeviceParams params;
    bool have_params = false;
    try {
      params = sim::toDeviceParams(sim::parsePresetText(h.config_text(), path + " (header config)"), path);
      have_params = true;
    } catch (const std::exception&) {
      // a trace from another backend without a preset: every kernel counts as compute
    }
    RankReport rr;
    rr.rank = rank;
    rr.file = path;
    RankData rd;
    rd.rank = rank;
    std::unordered_map<uint64_t, KernelShape> launches;   // by call
    std::unordered_map<uint32_t, std::string> names;
    std::map<std::string, uint64_t> group_counts;
    uint64_t last_host = 0;
    trace::Envelope e;
    while (reader.next(&e)) {
      if (e.record_case() == trace::Envelope::kName) {
        names[e.name().id()] = e.name().text();
        continue;
      }
      if (e.record_case() == trace::Envelope::kCommand) {
        const trace::DeviceCommand& c = e.command();
        auto n = names.find(c.name());
        Cmd cmd{c.kind(), c.device(), c.stream(), n == names.end() ? "?" : n->second, c.ready_ps(), c.start_ps(),
                c.end_ps(), c.call(), static_cast<double>(c.bytes())};
        if (c.kind() == trace::DeviceCommand::KERNEL) {
          auto it = launches.find(c.call());
          cmd.memory_bound = have_params && it != launches.end() && memoryBound(params, it->second);
          // The clusters it holds: one per tile, at most all of them (while it waits for
          // clusters others hold it holds fewer, which this does not see).
          cmd.clusters = have_params ? params.compute.clusters : 0;
          if (have_params && it != launches.end())
            cmd.clusters = std::min(params.compute.clusters,
                                    model::kernelTiles(params.compute, params.memory, it->second.kernel_class,
                                                       it->second.dtype, it->second.flops, it->second.bytes,
                                                       it->second.tiles));
          if (it != launches.end()) cmd.bytes = it->second.bytes;
        }
        rd.cmd_of_call[c.call()] = rd.cmds.size();
        rd.cmds.push_back(std::move(cmd));
        continue;
      }
      if (e.call() == 0) continue;
      ++rr.calls;
      Call call;
      call.begin = e.host_begin_ps();
      call.end = e.host_end_ps();
      if (!trace::movesClockOnly(e)) rd.first_host = std::min(rd.first_host, e.host_begin_ps());
      last_host = std::max(last_host, e.host_end_ps());
      // Calls in which the host waits for the device: what it waited for bounds what follows.
      const bool blocks =
          (e.record_case() == trace::Envelope::kApi && e.api().api() == trace::ApiCall::DEVICE_SYNCHRONIZE) ||
          (e.record_case() == trace::Envelope::kStream && e.stream().op() == trace::StreamOp::SYNCHRONIZE) ||
          (e.record_case() == trace::Envelope::kEvent && e.event().op() == trace::EventOp::SYNCHRONIZE) ||
          (e.record_case() == trace::Envelope::kMemcpy && !e.memcpy().async()) ||
          (e.record_case() == trace::Envelope::kMemset && !e.memset().async()) ||
          (e.record_case() == trace::Envelope::kFree && e.free().kind() == trace::MEMORY_DEVICE);
      if (blocks) rd.host_waits.emplace_back(e.host_end_ps(), e.host_begin_ps());
      if (e.record_case() == trace::Envelope::kKernel) {
        const trace::KernelLaunch& k = e.kernel();
        launches[e.call()] = KernelShape{static_cast<model::KernelClass>(k.kernel_class()),
                                         static_cast<model::DType>(k.dtype()), k.bytes_read() + k.bytes_written(),
                                         k.flops(), k.tiles()};
      } else if (e.record_case() == trace::Envelope::kEvent) {
        call.is_event = true;
        call.event = e.event().event();
        call.event_op = e.event().op();
        if (call.event_op == trace::EventOp::RECORD) rd.event_records[call.event].push_back(e.call());
      } else if (e.record_case() == trace::Envelope::kCollective) {
        const trace::Collective& c = e.collective();
        call.alone_s = c.seconds();
        call.group = c.group();
        if (call.group.empty())
          for (int m : c.ranks()) call.group += std::to_string(m) + ",";
      }
      rd.calls[e.call()] = std::move(call);
    }
    uint64_t first = rd.first_host, last = 0;
    if (first == std::numeric_limits<uint64_t>::max()) first = 0;
    std::vector<Interval> intervals;
    std::map<int, std::vector<std::pair<uint64_t, uint64_t>>> busy_compute, busy_dma, busy_fabric;
    std::map<int, double> cluster_ps;   // per device: kernel ps x clusters held
    std::map<int, double> memory_bytes;
    for (std::size_t i = 0; i < rd.cmds.size(); ++i) {
      const Cmd& c = rd.cmds[i];
      last = std::max(last, c.end);
      rd.streams[{c.device, c.stream}].push_back(i);
      rd.by_end.emplace_back(c.end, i);
      Category cat;
      switch (c.kind) {
        case trace::DeviceCommand::KERNEL: {
          cat = c.memory_bound ? kMemory : kCompute;
          pass.kernel_times.push_back(
              {&c.name, (c.end - c.start) / 1e6, c.memory_bound ? static_cast<double>(c.end - c.start) : 0.0});
          busy_compute[c.device].emplace_back(c.start, c.end);
          cluster_ps[c.device] += static_cast<double>(c.end - c.start) * c.clusters;
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
          if (c.name.rfind(kComputeStepPrefix, 0) == 0) {
            cat = kCompute;   // computation known only by its duration (a Chakra node)
            busy_compute[c.device].emplace_back(c.start, c.end);
            if (have_params) cluster_ps[c.device] += static_cast<double>(c.end - c.start) * params.compute.clusters;
            break;
          }
          cat = kComm;
          busy_fabric[c.device].emplace_back(c.start, c.end);
          {
            auto call = rd.calls.find(c.call);
            const std::string group = call != rd.calls.end() ? call->second.group : "";
            const std::pair<std::string, uint64_t> key{group, group_counts[group]++};
            rd.collectives[key] = i;
            rd.collective_key[i] = key;
          }
          break;
        default: continue;   // event records and waits take no time of their own
      }
      if (c.end > c.start) intervals.push_back({c.start, c.end, cat});
    }
    for (auto& [key, list] : rd.streams) {
      std::stable_sort(list.begin(), list.end(), [&](std::size_t a, std::size_t b) {
        return rd.cmds[a].start < rd.cmds[b].start;
      });
      for (std::size_t p = 0; p < list.size(); ++p) rd.stream_pos[list[p]] = p;
    }
    std::sort(rd.by_end.begin(), rd.by_end.end());
    std::sort(rd.host_waits.begin(), rd.host_waits.end());
    rr.device_commands = rd.cmds.size();
    if (rd.cmds.empty()) last = last_host;
    rr.breakdown = split(intervals, first, last);
    const double span = last > first ? static_cast<double>(last - first) : 0;
    std::map<int, bool> devices;
    for (const Cmd& c : rd.cmds) devices[c.device] = true;
    for (const auto& [dev, _] : devices) {
      Utilization u;
      u.device = dev;
      if (span > 0) {
        u.compute = unionPs(busy_compute[dev]) / span;
        if (have_params && params.compute.clusters > 0)
          u.clusters = std::min(1.0, cluster_ps[dev] / (span * params.compute.clusters));
        u.dma = unionPs(busy_dma[dev]) / span;
        u.fabric = unionPs(busy_fabric[dev]) / span;
        if (have_params && params.memory.bandwidth_bytes_per_s > 0)
          u.memory_bandwidth = memory_bytes[dev] / (params.memory.bandwidth_bytes_per_s * span * 1e-12);
      }
      rr.utilization.push_back(u);
    }
    pass.first = first;
    pass.last = last;
    pass.rr = std::move(rr);
    pass.rd = std::move(rd);
  }
  return pass;
}

}  // namespace

Report analyze(const std::map<int, std::string>& files, std::size_t top) {
  std::vector<std::pair<int, std::string>> order(files.begin(), files.end());
  std::vector<RankPass> passes(order.size());
  std::vector<std::exception_ptr> errors(order.size());
  // Ranks are independent until the critical path: one thread each, as many as the cores.
  const std::size_t workers =
      std::max<std::size_t>(1, std::min<std::size_t>(order.size(), std::thread::hardware_concurrency()));
  auto work = [&](std::size_t w) {
    for (std::size_t i = w; i < order.size(); i += workers) {
      try {
        passes[i] = readRank(order[i].first, order[i].second);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  if (workers == 1) {
    work(0);
  } else {
    std::vector<std::thread> threads;
    for (std::size_t w = 1; w < workers; ++w) threads.emplace_back(work, w);
    work(0);
    for (auto& t : threads) t.join();
  }
  for (const auto& e : errors)   // the first bad file in rank order, as a serial pass reports it
    if (e) std::rethrow_exception(e);

  Report report;
  uint64_t first_all = std::numeric_limits<uint64_t>::max(), last_all = 0;
  std::map<std::string, KernelTotal> kernels;
  std::map<std::string, double> kernel_memory_ps;
  std::vector<RankData> data;
  for (RankPass& pass : passes) {
    report.preset = pass.preset;
    report.device_name = pass.device_name;
    report.world_size = std::max(report.world_size, pass.world_size);
    for (const auto& k : pass.kernel_times) {
      KernelTotal& kt = kernels[*k.name];
      kt.name = *k.name;
      ++kt.count;
      kt.time_us += k.us;
      if (k.memory_ps > 0) kernel_memory_ps[*k.name] += k.memory_ps;
    }
    first_all = std::min(first_all, pass.first);
    last_all = std::max(last_all, pass.last);
    report.ranks.push_back(std::move(pass.rr));
    data.push_back(std::move(pass.rd));
  }
  if (first_all == std::numeric_limits<uint64_t>::max()) first_all = 0;
  report.total_us = last_all > first_all ? (last_all - first_all) / 1e6 : 0;
  for (auto& [name, kt] : kernels) {
    kt.memory_bound = kernel_memory_ps[name] / 1e6 > kt.time_us / 2;
    report.top_kernels.push_back(kt);
  }
  std::sort(report.top_kernels.begin(), report.top_kernels.end(), [](const KernelTotal& a, const KernelTotal& b) {
    return a.time_us != b.time_us ? a.time_us > b.time_us : a.name < b.name;
  });
  if (report.top_kernels.size() > top) report.top_kernels.resize(top);
  report.critical_path = criticalPath(data);
  if (report.critical_path.items.size() > top) report.critical_path.items.resize(top);
  return report;
}

}  // namespace cardsim::replay
