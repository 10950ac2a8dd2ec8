#include "traces/cli/ReplayOutput.h"

#include <cstdio>
#include <string>

#include "traces/cli/TraceFiles.h"

namespace cardsim::cli {

namespace {
std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6f", v);
  return b;
}

}  // namespace

void printReport(const replay::Report& r, const std::string& what, FILE* out) {
  // The recording's own configuration says so by the preset's name ("mlu370-x8 (as recorded)").
  const std::string on = r.configuration.rfind("preset", 0) == 0 || r.configuration.empty()
                             ? r.preset
                             : r.preset + " (" + r.configuration + ")";
  std::fprintf(out, "replay of %s on %s (%s), %d rank(s)\n", what.c_str(), on.c_str(), r.device_name.c_str(),
               r.world_size);
  std::fprintf(out, "total_us: %.3f\n", r.total_us);
  for (const std::string& n : r.notes) std::fprintf(out, "note: %s\n", n.c_str());
  std::fprintf(out, "%6s %12s %12s %12s %12s %12s %12s %12s\n", "rank", "total us", "compute", "memory",
               "copies", "comm", "exposed", "idle");
  for (const auto& k : r.ranks) {
    const auto& b = k.breakdown;
    std::fprintf(out, "%6d %12.3f %12.3f %12.3f %12.3f %12.3f %12.3f %12.3f\n", k.rank, b.total_us, b.compute_us,
                 b.memory_bound_us, b.copies_us, b.communication_us, b.exposed_communication_us, b.idle_us);
  }
  std::fprintf(out, "%6s %6s %12s %12s %12s %12s %12s\n", "rank", "device", "clusters", "kernels", "memory bw",
               "dma", "fabric");
  for (const auto& k : r.ranks)
    for (const auto& u : k.utilization)
      std::fprintf(out, "%6d %6d %11.1f%% %11.1f%% %11.1f%% %11.1f%% %11.1f%%\n", k.rank, u.device, 100 * u.clusters,
                   100 * u.compute, 100 * u.memory_bandwidth, 100 * u.dma, 100 * u.fabric);
  const auto& cp = r.critical_path;
  if (cp.total_us > 0) {
    std::fprintf(out, "critical path: %.3f us:", cp.total_us);
    for (const auto& [kind, us] : cp.by_kind) std::fprintf(out, " %s %.1f%%", kind.c_str(), 100 * us / cp.total_us);
    std::fprintf(out, "\n%8s %12s %10s  %s\n", "count", "time us", "kind", "on the path");
    for (const auto& it : cp.items)
      std::fprintf(out, "%8llu %12.3f %10s  %s\n", static_cast<unsigned long long>(it.count), it.time_us,
                   it.kind.c_str(), it.name.c_str());
    if (cp.items_left_off)
      std::fprintf(out, "%8s %12.3f %10s  (%llu more, not listed)\n", "", cp.items_left_off_us, "",
                   static_cast<unsigned long long>(cp.items_left_off));
  }
  if (!r.links.empty()) {
    const std::size_t shown = std::min<std::size_t>(r.links.size(), 10);
    std::fprintf(out, "fabric links (busiest %zu of %zu):\n%14s %12s %12s  %s\n", shown, r.links.size(), "MB moved",
                 "busy us", "utilization", "link");
    for (std::size_t i = 0; i < shown; ++i)
      std::fprintf(out, "%14.3f %12.3f %11.1f%%  %s\n", r.links[i].bytes / 1e6, r.links[i].busy_us,
                   100 * r.links[i].utilization, r.links[i].name.c_str());
  }
  if (!r.top_kernels.empty()) {
    std::fprintf(out, "top kernels (%s):\n%8s %12s %8s  %s\n", r.ranks.size() > 1 ? "all ranks" : "replayed rank",
                 "count", "time us", "bound", "name");
    for (const auto& k : r.top_kernels)
      std::fprintf(out, "%8llu %12.3f %8s  %s\n", static_cast<unsigned long long>(k.count), k.time_us,
                   k.memory_bound ? "memory" : "compute", k.name.c_str());
    if (r.kernels_left_off)
      std::fprintf(out, "%8s %12s %8s  (%llu more kernels, not listed)\n", "", "", "",
                   static_cast<unsigned long long>(r.kernels_left_off));
  }
}

std::string jsonReport(const replay::Report& r, const std::string& path, int scale) {
  std::string j = "{\"path\": " + jsonString(path) + ", \"preset\": " + jsonString(r.preset) +
                  ", \"configuration\": " + jsonString(r.configuration) +
                  ", \"device_name\": " + jsonString(r.device_name) + ", \"world_size\": " +
                  std::to_string(r.world_size) + ", \"replicated_to\": " + std::to_string(scale) +
                  ", \"total_us\": " + num(r.total_us) + ", \"notes\": [";
  for (std::size_t i = 0; i < r.notes.size(); ++i) j += std::string(i ? ", " : "") + jsonString(r.notes[i]);
  j += "], \"ranks\": [";
  for (std::size_t i = 0; i < r.ranks.size(); ++i) {
    const auto& b = r.ranks[i].breakdown;
    j += std::string(i ? ", " : "") + "{\"rank\": " + std::to_string(r.ranks[i].rank) + ", \"calls\": " +
         std::to_string(r.ranks[i].calls) + ", \"device_commands\": " + std::to_string(r.ranks[i].device_commands) +
         ", \"breakdown\": {\"total_us\": " + num(b.total_us) + ", \"compute_us\": " + num(b.compute_us) +
         ", \"memory_bound_us\": " + num(b.memory_bound_us) + ", \"copies_us\": " + num(b.copies_us) +
         ", \"communication_us\": " + num(b.communication_us) + ", \"exposed_communication_us\": " +
         num(b.exposed_communication_us) + ", \"idle_us\": " + num(b.idle_us) + "}, \"utilization\": [";
    for (std::size_t u = 0; u < r.ranks[i].utilization.size(); ++u) {
      const auto& x = r.ranks[i].utilization[u];
      j += std::string(u ? ", " : "") + "{\"device\": " + std::to_string(x.device) + ", \"clusters\": " +
           num(x.clusters) + ", \"compute\": " + num(x.compute) + ", \"memory_bandwidth\": " + num(x.memory_bandwidth) + ", \"dma\": " + num(x.dma) +
           ", \"fabric\": " + num(x.fabric) + "}";
    }
    j += "]}";
  }
  // The job's breakdown: the mean over its ranks (each rank's instants sum to the job's
  // total), so that a what-if of any rank count reads the same way.
  replay::Breakdown mean;
  for (const auto& rk : r.ranks) {
    const auto& b = rk.breakdown;
    mean.total_us += b.total_us, mean.compute_us += b.compute_us, mean.memory_bound_us += b.memory_bound_us;
    mean.copies_us += b.copies_us, mean.communication_us += b.communication_us;
    mean.exposed_communication_us += b.exposed_communication_us, mean.idle_us += b.idle_us;
  }
  const double n = static_cast<double>(std::max<std::size_t>(r.ranks.size(), 1));
  j += "], \"breakdown\": {\"total_us\": " + num(mean.total_us / n) + ", \"compute_us\": " +
       num(mean.compute_us / n) + ", \"memory_bound_us\": " + num(mean.memory_bound_us / n) + ", \"copies_us\": " +
       num(mean.copies_us / n) + ", \"communication_us\": " + num(mean.communication_us / n) +
       ", \"exposed_communication_us\": " + num(mean.exposed_communication_us / n) + ", \"idle_us\": " +
       num(mean.idle_us / n) + "}";
  // Every resource's utilization in one place: the means over the cards, each card (by rank
  // and device) and each fabric link.
  {
    double sums[5] = {0, 0, 0, 0, 0};
    std::string cards;
    std::size_t count = 0;
    for (const auto& rk : r.ranks)
      for (const auto& x : rk.utilization) {
        const double v[5] = {x.clusters, x.compute, x.memory_bandwidth, x.dma, x.fabric};
        for (int k = 0; k < 5; ++k) sums[k] += v[k];
        cards += std::string(count++ ? ", " : "") + "{\"rank\": " + std::to_string(rk.rank) + ", \"device\": " +
                 std::to_string(x.device) + ", \"clusters\": " + num(x.clusters) + ", \"compute\": " +
                 num(x.compute) + ", \"memory_bandwidth\": " + num(x.memory_bandwidth) + ", \"dma\": " +
                 num(x.dma) + ", \"fabric\": " + num(x.fabric) + "}";
      }
    const double c = static_cast<double>(std::max<std::size_t>(count, 1));
    j += ", \"utilization\": {\"clusters\": " + num(sums[0] / c) + ", \"compute\": " + num(sums[1] / c) +
         ", \"memory_bandwidth\": " + num(sums[2] / c) + ", \"dma\": " + num(sums[3] / c) + ", \"fabric\": " +
         num(sums[4] / c) + ", \"cards\": [" + cards + "], \"links\": [";
    for (std::size_t i = 0; i < r.links.size(); ++i) {
      const auto& l = r.links[i];
      j += std::string(i ? ", " : "") + "{\"link\": " + jsonString(l.name) + ", \"bytes\": " + num(l.bytes) +
           ", \"busy_us\": " + num(l.busy_us) + ", \"utilization\": " + num(l.utilization) + "}";
    }
    j += "]}";
  }
  j += ", \"critical_path\": {\"total_us\": " + num(r.critical_path.total_us) + ", \"by_kind\": {";
  {
    bool first = true;
    for (const auto& [kind, us] : r.critical_path.by_kind) {
      j += std::string(first ? "" : ", ") + jsonString(kind) + ": " + num(us);
      first = false;
    }
  }
  j += "}, \"items\": [";
  for (std::size_t i = 0; i < r.critical_path.items.size(); ++i) {
    const auto& it = r.critical_path.items[i];
    j += std::string(i ? ", " : "") + "{\"kind\": " + jsonString(it.kind) + ", \"name\": " + jsonString(it.name) +
         ", \"count\": " + std::to_string(it.count) + ", \"time_us\": " + num(it.time_us) + "}";
  }
  j += "], \"items_left_off\": " + std::to_string(r.critical_path.items_left_off) +
       ", \"items_left_off_us\": " + num(r.critical_path.items_left_off_us) + "}";
  j += ", \"links\": [";
  for (std::size_t i = 0; i < r.links.size(); ++i) {
    const auto& l = r.links[i];
    j += std::string(i ? ", " : "") + "{\"link\": " + jsonString(l.name) + ", \"bytes\": " + num(l.bytes) +
         ", \"busy_us\": " + num(l.busy_us) + ", \"utilization\": " + num(l.utilization) + "}";
  }
  j += "]";
  j += ", \"top_kernels\": [";
  for (std::size_t i = 0; i < r.top_kernels.size(); ++i) {
    const auto& k = r.top_kernels[i];
    j += std::string(i ? ", " : "") + "{\"name\": " + jsonString(k.name) + ", \"count\": " + std::to_string(k.count) +
         ", \"time_us\": " + num(k.time_us) + ", \"bound\": \"" + (k.memory_bound ? "memory" : "compute") + "\"}";
  }
  return j + "], \"top_kernels_left_off\": " + std::to_string(r.kernels_left_off) + "}\n";
}

}  // namespace cardsim::cli
