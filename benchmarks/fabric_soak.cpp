// fabric_soak_collectives_per_s: the fabric server under 1024 clients (threads with their own
// connections) in groups of 8 running 100,000 small all-reduces, while one client leaves
// mid-collective, one stalls past its timeout and one sends garbage. Also prints the latency
// a client sees per call and the process's memory at a quarter and at the end of the run;
// exits 1 if a completion was lost, duplicated or disagreed within its group.
#include <cstdio>
#include <cstdlib>

#include "simulator/FabricConfig.h"
#include "tests/cpp/FabricSoak.h"

using namespace cardsim;

int main(int argc, char** argv) {
  soak::Options o;
  if (argc > 1) o.clients = std::atoi(argv[1]);
  if (argc > 2) o.collectives = std::atoi(argv[2]);
  sim::SimOptions so;
  so.preset = o.preset;
  sim::FabricServer server(sim::loadFabricParams(so), sim::FabricServer::Options{o.preset, "127.0.0.1", 0, false});
  server.start();
  const soak::Result r = soak::run(server, o);
  server.stop();
  std::printf("fabric_soak_collectives_per_s: %.0f\n", static_cast<double>(r.completed) / r.wall_s);
  std::printf("fabric_soak_latency_mean_us: %.1f\nfabric_soak_latency_p99_us: %.1f\n", r.latency_mean_us,
              r.latency_p99_us);
  std::printf("fabric_soak_rss_kb: %ld at 25%%, %ld at the end\n", r.rss_quarter_kb, r.rss_end_kb);
  const bool ok = r.errors == 0 && r.completed == r.expected && r.disagreements == 0 && r.fault_errors == 3;
  if (!ok)
    std::fprintf(stderr, "fabric soak: %llu errors, %llu of %llu completed, %llu disagreements, %llu fault errors\n",
                 static_cast<unsigned long long>(r.errors), static_cast<unsigned long long>(r.completed),
                 static_cast<unsigned long long>(r.expected), static_cast<unsigned long long>(r.disagreements),
                 static_cast<unsigned long long>(r.fault_errors));
  return ok ? 0 : 1;
}
