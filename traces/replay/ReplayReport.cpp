// The cross-rank parts of a replay report: the ranks' passes (RankAnalysis.h) merged, the
// top kernels over all ranks and the critical path, which follows collectives across ranks.
#include "traces/replay/ReplayReport.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "traces/replay/RankAnalysis.h"

namespace cardsim::replay {

namespace {

enum PathKind { kKernel, kMemset, kCollective, kWait, kCopy, kHost, kPathKinds };
const char* const kPathKindNames[kPathKinds] = {"kernel", "memset", "collective", "wait", "copy", "host"};

PathKind pathKind(trace::DeviceCommand::Kind k) {
  switch (k) {
    case trace::DeviceCommand::KERNEL: return kKernel;
    case trace::DeviceCommand::MEMSET: return kMemset;
    case trace::DeviceCommand::COLLECTIVE: return kCollective;
    case trace::DeviceCommand::EVENT_RECORD:
    case trace::DeviceCommand::EVENT_WAIT: return kWait;
    default: return kCopy;
  }
}

// A step of computation timed by its caller (a Chakra COMP_NODE of a duration alone) is a
// collective command in the replay but computation on the path, as in the breakdown.
PathKind pathKindOf(const RankData& rd, const Cmd& c) {
  if (c.kind == trace::DeviceCommand::COLLECTIVE && rd.names[c.name].rfind(kComputeStepPrefix, 0) == 0)
    return kKernel;
  return pathKind(c.kind);
}

// The path's items by (kind, name), the names interned across ranks: a path has a step per
// command it crosses (tens of thousands), so a step must not build or compare strings.
class PathItems {
 public:
  explicit PathItems(const std::vector<RankData>& ranks) : of_rank_(ranks.size()) {
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      of_rank_[r].reserve(ranks[r].names.size());
      for (const std::string& n : ranks[r].names) of_rank_[r].push_back(intern(n));
    }
  }
  uint32_t intern(const std::string& name) {
    auto [it, fresh] = ids_.emplace(name, static_cast<uint32_t>(names_.size()));
    if (fresh) names_.push_back(name);
    return it->second;
  }
  uint32_t nameOf(std::size_t rank, uint32_t name) const { return of_rank_[rank][name]; }
  // Adds `ps` as the original did: per item, per kind and in total, in path order.
  void add(CriticalPath& cp, PathKind kind, uint32_t name, uint64_t ps) {
    if (ps == 0) return;
    const uint64_t key = static_cast<uint64_t>(kind) << 32 | name;
    auto [it, fresh] = index_.emplace(key, items_.size());
    if (fresh) items_.push_back(Item{kind, name, 0, 0});
    Item& item = items_[it->second];
    item.time_us += ps / 1e6;
    ++item.count;
    kind_us_[kind] += ps / 1e6;
    cp.total_us += ps / 1e6;
  }
  // The items in (kind, name) order, as a map by those strings would hold them.
  void finish(CriticalPath& cp) const {
    for (int k = 0; k < kPathKinds; ++k)
      if (kind_us_[k] > 0) cp.by_kind[kPathKindNames[k]] = kind_us_[k];   // added to: ps > 0
    for (const Item& i : items_) cp.items.push_back(PathItem{kPathKindNames[i.kind], names_[i.name], i.time_us, i.count});
    std::sort(cp.items.begin(), cp.items.end(), [](const PathItem& a, const PathItem& b) {
      return a.kind != b.kind ? a.kind < b.kind : a.name < b.name;
    });
  }

 private:
  struct Item {
    PathKind kind;
    uint32_t name;
    double time_us;
    uint64_t count;
  };
  std::vector<std::vector<uint32_t>> of_rank_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::unordered_map<uint64_t, std::size_t> index_;
  std::vector<Item> items_;
  double kind_us_[kPathKinds] = {};
};

CriticalPath criticalPath(const std::vector<RankData>& ranks) {
  CriticalPath cp;
  PathItems items(ranks);
  const uint32_t host_gap = items.intern("host gap"), for_the_card = items.intern("for the card");
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
      const Call* call = rd->calls.find(rd->cmds[cur].call);
      if (key != rd->collective_key.end() && call && call->alone_s >= 0) {
        const Cmd& c = rd->cmds[cur];
        const uint64_t alone = static_cast<uint64_t>(call->alone_s * 1e12 + 0.5);
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
    // What it waited for.
    uint64_t stream_end = 0, event_end = 0;
    std::size_t stream_prev = SIZE_MAX, event_prev = SIZE_MAX;
    {
      const auto& list = rd->streams.at({c.device, c.stream});
      const std::size_t pos = rd->stream_pos[cur];
      if (pos > 0) {
        stream_prev = list[pos - 1];
        stream_end = rd->cmds[stream_prev].end;
      }
    }
    if (c.kind == trace::DeviceCommand::EVENT_WAIT) {
      const Call* call = rd->calls.find(c.call);
      if (call && call->is_event) {
        auto recs = rd->event_records.find(call->event);
        if (recs != rd->event_records.end()) {
          auto it = std::lower_bound(recs->second.begin(), recs->second.end(), c.call);
          if (it != recs->second.begin()) {
            if (const std::size_t* cmd = rd->cmd_of_call.find(*(it - 1))) {
              event_prev = *cmd;
              event_end = rd->cmds[event_prev].end;
            }
          }
        }
      }
    }
    // An event wait that held its stream until the event's work was done: the path is that
    // work (on the stream that recorded the event), not the wait; only what the wait took
    // after the event is its own.
    if (event_prev != SIZE_MAX && event_end > c.start) {
      items.add(cp, kWait, items.nameOf(static_cast<std::size_t>(r), c.name),
                std::min(c.end, horizon) > event_end ? std::min(c.end, horizon) - event_end : 0);
      horizon = std::min(horizon, event_end);
      cur = event_prev;
      continue;
    }
    items.add(cp, pathKindOf(*rd, c), items.nameOf(static_cast<std::size_t>(r), c.name),
              std::min(c.end, horizon) > c.start ? std::min(c.end, horizon) - c.start : 0);
    horizon = std::min(horizon, c.start);
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
        items.add(cp, kWait, for_the_card, c.start > end ? c.start - end : 0);
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
    const Call* call = rd->calls.find(c.call);
    const uint64_t since = call ? call->begin : c.ready;
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
      items.add(cp, kHost, host_gap, std::min(c.ready, horizon) > from ? std::min(c.ready, horizon) - from : 0);
      // A rank whose recording began after another's (record_trace at different times):
      // the run starts at the first rank's first call, so the path covers the whole run.
      uint64_t run_first = from;
      for (const RankData& other : ranks) run_first = std::min(run_first, other.first_host);
      if (from > run_first) items.add(cp, kHost, items.intern("before the rank's recording"), from - run_first);
      break;
    }
    items.add(cp, kHost, host_gap,
              std::min(c.ready, horizon) > waited_end ? std::min(c.ready, horizon) - waited_end : 0);
    horizon = std::min(horizon, waited_end);
    cur = waited;
  }
  items.finish(cp);
  std::sort(cp.items.begin(), cp.items.end(), [](const PathItem& a, const PathItem& b) {
    return a.time_us != b.time_us ? a.time_us > b.time_us : a.name < b.name;
  });
  return cp;
}


}  // namespace

Report analyze(const std::map<int, std::string>& files, std::size_t top) {
  std::vector<std::pair<int, std::string>> order(files.begin(), files.end());
  std::vector<RankPass> passes(order.size());
  inParallel(order.size(), [&](std::size_t i) {
    passes[i] = readRank(order[i].first, order[i].second);
    buildIndex(passes[i].rd);
  });
  return merge(std::move(passes), top);
}

Report merge(std::vector<RankPass> passes, std::size_t top) {
  Report report;
  uint64_t first_all = std::numeric_limits<uint64_t>::max(), last_all = 0;
  struct KernelSum {
    KernelTotal total;
    double memory_ps;
  };
  std::vector<KernelSum> kernels;
  std::map<std::string, std::size_t> kernel_index;   // by name: the order the report lists ties in
  std::vector<RankData> data;
  for (RankPass& pass : passes) {
    report.preset = pass.preset;
    report.device_name = pass.device_name;
    report.world_size = std::max(report.world_size, pass.world_size);
    // The kernels' times in command order, so that the totals add up the same every time
    // (by name: the rank's name ids mapped onto the run's once, not a string per kernel).
    std::vector<std::size_t> slot(pass.rd.names.size(), SIZE_MAX);
    for (const Cmd& c : pass.rd.cmds) {
      if (c.kind != trace::DeviceCommand::KERNEL) continue;
      std::size_t& k = slot[c.name];
      if (k == SIZE_MAX) {
        const std::string& name = pass.rd.name(c);
        auto [it, fresh] = kernel_index.emplace(name, kernels.size());
        if (fresh) kernels.push_back(KernelSum{KernelTotal{name, 0, 0, false}, 0});
        k = it->second;
      }
      KernelSum& ks = kernels[k];
      ++ks.total.count;
      ks.total.time_us += (c.end - c.start) / 1e6;
      if (c.memory_bound && c.end > c.start) ks.memory_ps += static_cast<double>(c.end - c.start);
    }
    first_all = std::min(first_all, pass.first);
    last_all = std::max(last_all, pass.last);
    report.ranks.push_back(std::move(pass.rr));
    buildIndex(pass.rd);   // unless built already, in parallel with the other ranks'
    data.push_back(std::move(pass.rd));
  }
  if (first_all == std::numeric_limits<uint64_t>::max()) first_all = 0;
  report.total_us = last_all > first_all ? (last_all - first_all) / 1e6 : 0;
  for (const auto& [name, k] : kernel_index) {
    KernelTotal kt = kernels[k].total;
    kt.memory_bound = kernels[k].memory_ps / 1e6 > kt.time_us / 2;
    report.top_kernels.push_back(kt);
  }
  std::sort(report.top_kernels.begin(), report.top_kernels.end(), [](const KernelTotal& a, const KernelTotal& b) {
    return a.time_us != b.time_us ? a.time_us > b.time_us : a.name < b.name;
  });
  if (report.top_kernels.size() > top) {
    report.kernels_left_off = report.top_kernels.size() - top;
    report.top_kernels.resize(top);
  }
  report.critical_path = criticalPath(data);
  CriticalPath& cp = report.critical_path;
  if (cp.items.size() > top) {
    cp.items_left_off = cp.items.size() - top;
    for (std::size_t i = top; i < cp.items.size(); ++i) cp.items_left_off_us += cp.items[i].time_us;
    cp.items.resize(top);
  }
  return report;
}

}  // namespace cardsim::replay
