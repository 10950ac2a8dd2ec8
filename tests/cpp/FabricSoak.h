// A soak of the fabric server: many clients (threads, each with its own connection, as rank
// processes would have) in groups running small collectives back to back, while other
// clients misbehave (one leaves mid-collective, one stalls past the timeout, one sends
// garbage). Checks that every completion arrives once and agrees across the group, and
// reports throughput, latency and the process's memory over the run. Shared by the gtest
// (a short soak) and benchmarks/fabric_soak.cpp (the long one).
#pragma once

#include <boost/asio.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "simulator/FabricClient.h"
#include "simulator/FabricServer.h"

namespace cardsim::soak {

struct Options {
  int clients = 1024;       // well-behaved ranks, in groups of `group_size`
  int group_size = 8;
  int collectives = 100000; // in all, spread evenly over the groups
  bool faults = true;
  std::string preset = "mlu370-x8";
};

struct Result {
  uint64_t expected = 0, completed = 0;
  uint64_t errors = 0;          // well-behaved clients' collectives that failed (must be 0)
  uint64_t disagreements = 0;   // a group's members given different completion times
  uint64_t fault_errors = 0;    // the misbehaving groups' expected failures seen
  double wall_s = 0;
  double latency_mean_us = 0, latency_p99_us = 0;   // per call, as a client waits
  long rss_quarter_kb = 0, rss_end_kb = 0;          // at 25 % and 100 % of the run
  uint64_t server_completed = 0, server_failed = 0, server_pending = 0;
};

inline long rssKb() {
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

inline Result run(sim::FabricServer& server, const Options& o) {
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  const int groups = o.clients / o.group_size;
  const int per_group = o.collectives / groups;
  const int fault_ranks = o.faults ? 4 : 0;
  const uint32_t world = static_cast<uint32_t>(o.clients + fault_ranks);
  Result res;
  res.expected = static_cast<uint64_t>(groups) * per_group;

  std::vector<std::unique_ptr<sim::FabricClient>> clients(world);
  for (uint32_t r = 0; r < world; ++r)
    clients[r] = std::make_unique<sim::FabricClient>(address, sim::FabricClient::Identity{"soak", r, world, o.preset}, 30);

  std::vector<std::vector<uint64_t>> ends(static_cast<size_t>(o.clients));
  std::vector<std::vector<float>> latencies(static_cast<size_t>(o.clients));
  std::atomic<uint64_t> calls{0}, errors{0};
  std::atomic<long> rss_quarter{0};
  const uint64_t total_calls = res.expected * static_cast<uint64_t>(o.group_size);

  auto member = [&](int r) {
    const int g = r / o.group_size;
    std::vector<int> ranks;
    for (int i = 0; i < o.group_size; ++i) ranks.push_back(g * o.group_size + i);
    const std::string key = "g" + std::to_string(g);
    uint64_t now = 0;
    ends[static_cast<size_t>(r)].reserve(static_cast<size_t>(per_group));
    latencies[static_cast<size_t>(r)].reserve(static_cast<size_t>(per_group));
    for (int i = 0; i < per_group; ++i) {
      sim::FabricClient::Collective c;
      c.group = key;
      c.ranks = ranks;
      c.seq = clients[static_cast<size_t>(r)]->nextSeq(key);
      c.op = "all_reduce";
      c.bytes = 4096;
      c.arrival_ps = now + static_cast<uint64_t>(r % o.group_size) * 1000;
      c.timeout_s = 60;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        now = clients[static_cast<size_t>(r)]->collective(c).end_ps;
      } catch (const std::exception&) {
        ++errors;
        return;
      }
      latencies[static_cast<size_t>(r)].push_back(
          std::chrono::duration<float, std::micro>(std::chrono::steady_clock::now() - t0).count());
      ends[static_cast<size_t>(r)].push_back(now);
      if (++calls == total_calls / 4) rss_quarter = rssKb();
    }
  };

  std::atomic<uint64_t> fault_errors{0};
  std::vector<std::thread> faults;
  if (o.faults) {
    const int a = o.clients;
    // A rank that leaves while its peer waits in a collective.
    faults.emplace_back([&, a] {
      sim::FabricClient::Collective c;
      c.group = "leaver";
      c.ranks = {a, a + 1};
      c.op = "all_reduce";
      c.bytes = 4096;
      c.timeout_s = 60;
      std::thread leave([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        clients[static_cast<size_t>(a + 1)]->close();
      });
      try {
        clients[static_cast<size_t>(a)]->collective(c);
      } catch (const std::exception&) {
        ++fault_errors;
      }
      leave.join();
    });
    // A rank that stalls: its peer's collective times out.
    faults.emplace_back([&, a] {
      sim::FabricClient::Collective c;
      c.group = "staller";
      c.ranks = {a + 2, a + 3};
      c.op = "all_reduce";
      c.bytes = 4096;
      c.timeout_s = 0.5;
      try {
        clients[static_cast<size_t>(a + 2)]->collective(c);
      } catch (const std::exception&) {
        ++fault_errors;
      }
    });
    // Garbage on a socket of its own: the server must drop only that connection.
    faults.emplace_back([&] {
      namespace asio = boost::asio;
      asio::io_context io;
      asio::ip::tcp::socket s(io);
      boost::system::error_code ec;
      s.connect({asio::ip::make_address("127.0.0.1"), server.port()}, ec);
      if (ec) return;
      const std::string junk(4096, '\xff');
      asio::write(s, asio::buffer(junk), ec);
      char buf[256];
      while (!ec) s.read_some(asio::buffer(buf), ec);   // until the server closes it
      ++fault_errors;
    });
  }

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < o.clients; ++r) threads.emplace_back(member, r);
  for (auto& t : threads) t.join();
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& t : faults) t.join();
  res.rss_end_kb = rssKb();
  res.rss_quarter_kb = rss_quarter.load() ? rss_quarter.load() : res.rss_end_kb;
  res.errors = errors;
  res.fault_errors = fault_errors;

  for (int g = 0; g < groups; ++g) {
    const auto& first = ends[static_cast<size_t>(g * o.group_size)];
    res.completed += first.size();
    for (int i = 1; i < o.group_size; ++i)
      if (ends[static_cast<size_t>(g * o.group_size + i)] != first) ++res.disagreements;
  }
  std::vector<float> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  if (!all.empty()) {
    double sum = 0;
    for (float v : all) sum += v;
    res.latency_mean_us = sum / static_cast<double>(all.size());
    const size_t k = all.size() * 99 / 100;
    std::nth_element(all.begin(), all.begin() + static_cast<long>(k), all.end());
    res.latency_p99_us = all[k];
  }
  for (auto& c : clients) c->close();
  const sim::FabricServer::Stats st = server.stats();
  res.server_completed = st.collectives_completed;
  res.server_failed = st.collectives_failed;
  res.server_pending = st.collectives_pending;
  return res;
}

}  // namespace cardsim::soak
