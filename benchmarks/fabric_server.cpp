// fabric_server_collectives_per_s: small collectives per wall second through the fabric
// server (FabricServer.h) with 8 ranks, each a thread with its own connection, as 8 rank
// processes on the server's host would have (its Unix-domain socket, as a job started on
// one host connects; fabric_server_collectives_per_s_tcp: the same over loopback TCP, as
// ranks on other hosts would). Each all-reduce completes only when all 8 have arrived, so
// this is the server's round-trip rate for a full group, not a per-message rate.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "simulator/FabricClient.h"
#include "simulator/FabricConfig.h"
#include "simulator/FabricServer.h"

using namespace cardsim;

namespace {

// Collectives per wall second, the ranks connected to `address` (the server's local or TCP one).
double rate(const std::string& address, const std::string& job, int collectives) {
  const int ranks = 8;
  const char* preset = "mlu370-x8";
  std::vector<std::unique_ptr<sim::FabricClient>> clients;
  for (int r = 0; r < ranks; ++r)
    clients.push_back(std::make_unique<sim::FabricClient>(
        address, sim::FabricClient::Identity{job, static_cast<uint32_t>(r), ranks, preset}, 10));
  std::vector<int> members;
  for (int r = 0; r < ranks; ++r) members.push_back(r);

  auto rank = [&](int r, int count, uint64_t* end_ps) {
    uint64_t now = 0;
    for (int i = 0; i < count; ++i) {
      sim::FabricClient::Collective c;
      c.group = "0-7#0";
      c.ranks = members;
      c.seq = clients[r]->nextSeq(c.group);
      c.op = "all_reduce";
      c.bytes = 4096;
      c.arrival_ps = now + static_cast<uint64_t>(r) * 1000;   // ranks arrive staggered
      c.timeout_s = 30;
      now = clients[r]->collective(c).end_ps;
    }
    *end_ps = now;
  };
  auto round = [&](int count) {
    std::vector<uint64_t> ends(ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) threads.emplace_back(rank, r, count, &ends[r]);
    for (auto& t : threads) t.join();
    for (int r = 1; r < ranks; ++r)
      if (ends[r] != ends[0]) {
        std::fprintf(stderr, "bench: ranks disagree on the last completion (%llu vs %llu ps)\n",
                     static_cast<unsigned long long>(ends[r]), static_cast<unsigned long long>(ends[0]));
        std::exit(1);
      }
  };
  round(50);   // warm up connections and the model's caches
  const auto t0 = std::chrono::steady_clock::now();
  round(collectives);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return collectives / s;
}

}  // namespace

int main(int argc, char** argv) {
  const int collectives = argc > 1 ? std::atoi(argv[1]) : 2000;
  const char* preset = "mlu370-x8";
  sim::SimOptions o;
  o.preset = preset;
  sim::FabricServer::Options so{preset, "127.0.0.1", 0, false};
  so.local = true;
  sim::FabricServer server(sim::loadFabricParams(o), so);
  server.start();
  const double local = rate(server.localAddress(), "bench-local", collectives);
  const double tcp = rate("127.0.0.1:" + std::to_string(server.port()), "bench-tcp", collectives);
  server.stop();
  std::printf("fabric_server_collectives_per_s: %.0f\n", local);
  std::printf("fabric_server_collectives_per_s_tcp: %.0f\n", tcp);
  return 0;
}
