// The fabric server: completions from every member's arrival whatever the wall-clock order,
// and faults (timeouts, departures, disagreement, other protocol versions, garbage) that
// cost the offending collective or connection only.
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio.hpp>

#include <algorithm>
#include <array>
#include <limits>
#include <chrono>
#include <future>
#include <thread>

#include "device_models/Command.h"
#include "simulator/FabricClient.h"
#include "simulator/FabricConfig.h"
#include "simulator/FabricModel.h"
#include "simulator/FabricNames.h"
#include "simulator/FabricServer.h"
#include "simulator/FabricServerState.h"   // forEachHostLast, tested directly
#include "simulator/FabricWire.h"
#include "simulator/proto/fabric.pb.h"

using namespace cardsim;
using sim::FabricClient;
using sim::FabricError;
using sim::FabricServer;

namespace {

const char* kPreset = "mlu370-x8";

fabric::FabricParams params() {
  sim::SimOptions o;
  o.preset = kPreset;
  return sim::loadFabricParams(o);
}

struct Fixture {
  FabricServer server{params(), FabricServer::Options{kPreset, "127.0.0.1", 0, false}};
  std::string address;
  Fixture() {
    server.start();
    address = "127.0.0.1:" + std::to_string(server.port());
  }
  std::unique_ptr<FabricClient> client(uint32_t rank, uint32_t world, const std::string& job = "job") {
    return std::make_unique<FabricClient>(address, FabricClient::Identity{job, rank, world, kPreset}, 5);
  }
};

FabricClient::Collective allReduce(std::vector<int> ranks, uint64_t arrival_ps, double bytes = 1 << 20,
                                   double timeout_s = 10) {
  FabricClient::Collective c;
  c.group = "g";
  c.ranks = std::move(ranks);
  c.op = "all_reduce";
  c.bytes = bytes;
  c.arrival_ps = arrival_ps;
  c.timeout_s = timeout_s;
  return c;
}

double aloneSeconds(double bytes, const std::vector<int>& ranks) {
  sim::FabricModel m(params());
  return m.time(fabric::CollectiveOp::AllReduce, bytes, ranks, 0, 1, "").seconds;
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(FabricServer, CompletesAtLatestArrivalPlusModelTimeWhateverTheArrivalOrder) {
  Fixture fx;
  const std::vector<int> ranks = {0, 1, 2, 3};
  const uint64_t arrivals[4] = {5'000'000, 9'000'000, 1'000'000, 7'000'000};
  const uint64_t expected = 9'000'000 + model::secondsToPs(aloneSeconds(1 << 20, ranks));
  std::vector<std::unique_ptr<FabricClient>> clients;
  for (uint32_t r = 0; r < 4; ++r) clients.push_back(fx.client(r, 4));
  // The same collective sequence, with the ranks reaching the server in three different
  // wall-clock orders: the answers must not change.
  const std::vector<std::vector<int>> orders = {{0, 1, 2, 3}, {3, 2, 1, 0}, {2, 0, 3, 1}};
  for (size_t round = 0; round < orders.size(); ++round) {
    std::vector<std::future<FabricClient::Completion>> done(4);
    for (size_t i = 0; i < 4; ++i) {
      const int r = orders[round][i];
      auto c = allReduce(ranks, arrivals[r] + round * 100'000'000ull);
      c.seq = clients[r]->nextSeq(c.group);
      done[r] = std::async(std::launch::async, [&clients, r, c] { return clients[r]->collective(c); });
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (int r = 0; r < 4; ++r) {
      const auto got = done[r].get();
      EXPECT_EQ(got.end_ps, expected + round * 100'000'000ull) << "round " << round << " rank " << r;
      EXPECT_FALSE(got.algorithm.empty());
    }
  }
  EXPECT_EQ(fx.server.stats().collectives_completed, 3u);
  EXPECT_EQ(fx.server.stats().collectives_pending, 0u);
}

TEST(FabricServer, AnUnevenAllToAllIsTimedFromEveryMembersSends) {
  Fixture fx;
  const std::vector<int> ranks = {0, 1, 2, 3};
  // Rank r sends 6 MiB to rank r + 2 (on the other card) and 1 MiB to each other rank.
  constexpr double mib = 1 << 20;
  std::vector<double> pairs(16, 0.0);
  std::vector<std::vector<double>> rows(4, std::vector<double>(4, mib));
  for (int r = 0; r < 4; ++r) {
    rows[r][(r + 2) % 4] = 6 * mib;
    for (int b = 0; b < 4; ++b) pairs[size_t(r) * 4 + b] = rows[r][b];
  }
  sim::FabricModel m(params());
  const double uneven = m.time(fabric::CollectiveOp::AllToAll, 8 * mib, ranks, 0, 1, "", nullptr, false, &pairs).seconds;
  const double even = m.time(fabric::CollectiveOp::AllToAll, 8 * mib, ranks, 0, 1, "").seconds;
  ASSERT_GT(uneven, even * 1.5);   // the skew shows
  std::vector<std::unique_ptr<FabricClient>> clients;
  for (uint32_t r = 0; r < 4; ++r) clients.push_back(fx.client(r, 4));
  std::vector<std::future<FabricClient::Completion>> done(4);
  for (int r = 0; r < 4; ++r) {
    FabricClient::Collective c = allReduce(ranks, 1'000'000 * (r + 1), 8 * mib);
    c.op = "all_to_all";
    c.send_bytes = rows[r];
    c.seq = clients[r]->nextSeq(c.group);
    done[r] = std::async(std::launch::async, [&clients, r, c] { return clients[r]->collective(c); });
  }
  for (int r = 0; r < 4; ++r) EXPECT_EQ(done[r].get().end_ps, 4'000'000 + model::secondsToPs(uneven)) << r;
  // Both members' all_to_all of 2 MiB over group "split", each shaped by `shape(rank, c)`,
  // fail on both members with `expected` in their error.
  auto bothFail = [&clients](const auto& shape, const std::string& expected) {
    std::vector<std::future<std::string>> failed(2);
    for (int r = 0; r < 2; ++r) {
      FabricClient::Collective c = allReduce({0, 1}, 1'000'000, 2 * mib);
      c.group = "split";
      c.op = "all_to_all";
      shape(r, c);
      c.seq = clients[r]->nextSeq(c.group);
      failed[r] = std::async(std::launch::async, [&clients, r, c] { return errorOf([&] { clients[r]->collective(c); }); });
    }
    for (int r = 0; r < 2; ++r) {
      const std::string why = failed[r].get();
      EXPECT_NE(why.find(expected), std::string::npos) << r << ": " << why;
    }
  };
  // Members that disagree on the splits (rank 1 expects 2 MiB from rank 0, which sends it 1)
  // fail it, every one of them, naming both sides.
  bothFail(
      [](int r, FabricClient::Collective& c) {
        c.send_bytes = {mib, mib};
        c.recv_bytes = r == 0 ? std::vector<double>{mib, mib} : std::vector<double>{2 * mib, mib};
      },
      "the ranks disagree on its splits: rank 0 sends rank 1 1048576 bytes, but rank 1 expects 2097152 bytes from rank 0");
  // A member that gave no rows (the even exchange of its 2 MiB) expects 1 MiB from each:
  // a peer sending it 512 KiB fails the exchange on both, named as the peer's.
  bothFail(
      [](int r, FabricClient::Collective& c) {
        if (r != 0) return;
        c.send_bytes = {mib, mib / 2};
        c.recv_bytes = {mib, mib};
        c.bytes = 1.5 * mib;
      },
      "the ranks disagree on its splits: rank 0 sends rank 1 524288 bytes, but rank 1 expects 1048576 bytes from rank 0");
  // A member's split to itself counts too (every pair between members agrees).
  bothFail(
      [](int r, FabricClient::Collective& c) {
        c.send_bytes = {mib, mib};
        c.recv_bytes = r == 1 ? std::vector<double>{mib, mib / 2} : std::vector<double>{mib, mib};
      },
      "the ranks disagree on its splits: rank 1 sends rank 1 1048576 bytes, but rank 1 expects 524288 bytes from rank 1");
  // A member's sizes must be one per member, and only an all_to_all has them.
  FabricClient::Collective bad = allReduce({0, 1}, 0, mib);
  bad.send_bytes = {mib, mib, mib};
  bad.seq = clients[0]->nextSeq(bad.group);
  const std::string why = errorOf([&] { clients[0]->collective(bad); });
  EXPECT_NE(why.find("sent 3 per-member sizes; only an all_to_all has them"), std::string::npos) << why;
}

TEST(FabricServer, MembersAreTimedOnTheDevicesTheyRunOn) {
  Fixture fx;
  const double bytes = 16 << 20;
  sim::FabricModel m(params());
  const double near = m.time(fabric::CollectiveOp::AllReduce, bytes, {0, 1}, 0, 1, "").seconds;
  const double far = m.time(fabric::CollectiveOp::AllReduce, bytes, {0, 2}, 0, 1, "").seconds;
  ASSERT_NE(near, far);   // chips 0 and 1 share a card; chip 2 is on the next one
  std::vector<std::unique_ptr<FabricClient>> clients;
  for (uint32_t r = 0; r < 2; ++r) clients.push_back(fx.client(r, 2));
  // Each run well after the last one's end: alone on the fabric.
  uint64_t at = 0;
  auto run = [&](int d0, int d1) {
    at += 10'000'000'000ull;
    std::vector<std::future<FabricClient::Completion>> done(2);
    for (int r = 0; r < 2; ++r) {
      FabricClient::Collective c = allReduce({0, 1}, at, bytes);
      c.device = r == 0 ? d0 : d1;
      c.seq = clients[r]->nextSeq(c.group);
      done[r] = std::async(std::launch::async, [&clients, r, c] { return clients[r]->collective(c); });
    }
    return std::array<FabricClient::Completion, 2>{done[0].get(), done[1].get()};
  };
  for (const auto& got : run(0, 2)) {   // rank 1 on chip 2
    EXPECT_EQ(got.end_ps, at + model::secondsToPs(far));
    EXPECT_EQ(got.note, "");
  }
  for (const auto& got : run(-1, -1)) EXPECT_EQ(got.end_ps, at + model::secondsToPs(near));   // device r
  // Both on chip 0: timed on their ranks' devices, and told so.
  for (const auto& got : run(0, 0)) {
    EXPECT_EQ(got.end_ps, at + model::secondsToPs(near));
    EXPECT_NE(got.note.find("ranks 0 and 1 all run on device 0"), std::string::npos) << got.note;
  }
  // A device off the rank's node (8 chips a node) is the client's bug: refused, naming it.
  FabricClient::Collective c = allReduce({0}, 0, bytes);
  c.group = "alone";
  c.device = 9;
  c.seq = clients[0]->nextSeq(c.group);
  const std::string why = errorOf([&] { clients[0]->collective(c); });
  EXPECT_NE(why.find("runs it on fabric device 9, not on its node (node 0: devices 0..7)"), std::string::npos) << why;
}

TEST(FabricServer, NoMemberEndsBeforeTheLastMemberHasIssuedIt) {
  // A collective starts at its members' calls and ends no earlier than the latest member's
  // issue (its launch overhead) ends: a short one is launch-bound on every member; a long
  // one keeps the latest arrival plus the model's time.
  Fixture fx;
  const std::vector<int> ranks = {0, 1};
  std::vector<std::unique_ptr<FabricClient>> clients;
  for (uint32_t r = 0; r < 2; ++r) clients.push_back(fx.client(r, 2));
  const uint64_t launch = 4'000'000;   // 4 us
  uint64_t t0 = 0;
  for (const double bytes : {4.0, double(64 << 20)}) {
    const uint64_t alone = model::secondsToPs(aloneSeconds(bytes, ranks));
    t0 += 1'000'000'000;   // 1 ms apart: nothing overlaps
    const uint64_t calls[2] = {t0 + 10'000'000, t0 + 12'000'000};
    std::vector<std::future<FabricClient::Completion>> done(2);
    for (int r = 0; r < 2; ++r) {
      auto c = allReduce(ranks, calls[r] + 1, bytes);
      c.launched_ps = calls[r] + launch;
      c.seq = clients[r]->nextSeq(c.group);
      done[r] = std::async(std::launch::async, [&clients, r, c] { return clients[r]->collective(c); });
    }
    const uint64_t want = std::max(calls[1] + 1 + alone, calls[1] + launch);
    for (int r = 0; r < 2; ++r) EXPECT_EQ(done[r].get().end_ps, want) << bytes << " B, rank " << r;
    if (bytes < 1024) EXPECT_LT(alone, launch - 1);   // the short one was launch-bound
    else EXPECT_GT(alone, launch);
  }
}

TEST(FabricServer, RanksOverItsUnixSocketAndOverTcpShareOneJobWithTheSameAnswers) {
  // A server with Options::local also listens on a Unix-domain socket (an abstract name):
  // the ranks of its host connect there, others over TCP, and all take part in one job.
  FabricServer::Options o{kPreset, "127.0.0.1", 0, false};
  o.local = true;
  FabricServer server(params(), o);
  server.start();
  const std::string local = server.localAddress();
  ASSERT_EQ(local.rfind("unix:@", 0), 0u) << local;
  const std::string tcp = "127.0.0.1:" + std::to_string(server.port());
  std::vector<std::unique_ptr<FabricClient>> clients;
  for (uint32_t r = 0; r < 4; ++r)
    clients.push_back(std::make_unique<FabricClient>(r % 2 ? local : tcp, FabricClient::Identity{"job", r, 4, kPreset}, 5));
  const std::vector<int> ranks = {0, 1, 2, 3};
  const uint64_t arrivals[4] = {5'000'000, 9'000'000, 1'000'000, 7'000'000};
  std::vector<std::future<FabricClient::Completion>> done;
  for (int r = 0; r < 4; ++r) {
    auto c = allReduce(ranks, arrivals[r]);
    c.seq = clients[static_cast<size_t>(r)]->nextSeq(c.group);
    done.push_back(std::async(std::launch::async, [&clients, r, c] { return clients[static_cast<size_t>(r)]->collective(c); }));
  }
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(done[static_cast<size_t>(r)].get().end_ps, 9'000'000 + model::secondsToPs(aloneSeconds(1 << 20, ranks)))
        << "rank " << r;
  EXPECT_EQ(server.stats().connections_accepted, 4u);
  // A server without it has no local address; one that stopped refuses connections there.
  Fixture plain;
  EXPECT_EQ(plain.server.localAddress(), "");
  server.stop();
  const std::string e = errorOf([&] { FabricClient(local, FabricClient::Identity{"job", 0, 1, kPreset}, 0.3); });
  EXPECT_NE(e.find("cannot connect to the fabric server at " + local), std::string::npos) << e;
  const std::string bad = errorOf([] { FabricClient("unix:", FabricClient::Identity{"job", 0, 1, kPreset}, 0.3); });
  EXPECT_NE(bad.find("the socket's name must be 1 to"), std::string::npos) << bad;
}

TEST(FabricServer, TimeoutNamesTheGroupTheCollectiveAndTheMissingRank) {
  Fixture fx;
  auto c0 = fx.client(0, 3), c1 = fx.client(1, 3), c2 = fx.client(2, 3);
  const std::vector<int> ranks = {0, 1, 2};
  auto f0 = std::async(std::launch::async, [&] { return errorOf([&] { c0->collective(allReduce(ranks, 0, 4096, 0.5)); }); });
  auto f1 = std::async(std::launch::async, [&] { return errorOf([&] { c1->collective(allReduce(ranks, 0, 4096, 0.5)); }); });
  const auto t0 = std::chrono::steady_clock::now();
  for (auto* f : {&f0, &f1}) {
    const std::string e = f->get();
    EXPECT_NE(e.find("all_reduce #0 of process group [0, 1, 2]"), std::string::npos) << e;
    EXPECT_NE(e.find("timed out"), std::string::npos) << e;
    EXPECT_NE(e.find("rank(s) [2]"), std::string::npos) << e;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // The server goes on: the next collective of the group completes.
  auto ok = allReduce({0, 1}, 0);
  ok.group = "pair";
  auto a = std::async(std::launch::async, [&] { return c0->collective(ok); });
  EXPECT_GT(c1->collective(ok).end_ps, 0u);
  EXPECT_GT(a.get().end_ps, 0u);
}

TEST(FabricServer, ARankThatLeavesFailsItsPeersAtOnceNamingIt) {
  Fixture fx;
  auto c0 = fx.client(0, 2), c1 = fx.client(1, 2);
  auto f = std::async(std::launch::async, [&] { return errorOf([&] { c0->collective(allReduce({0, 1}, 0, 4096, 60)); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = std::chrono::steady_clock::now();
  c1->close();   // as a killed process's socket does
  const std::string e = f.get();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_NE(e.find("all_reduce #0 of process group [0, 1]"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 1 left the job"), std::string::npos) << e;
  // Later collectives with the departed rank fail at once too.
  const std::string again = errorOf([&] {
    auto c = allReduce({0, 1}, 0, 4096, 60);
    c.seq = 1;
    c0->collective(c);
  });
  EXPECT_NE(again.find("rank 1 left the job"), std::string::npos) << again;
}

TEST(FabricServer, RanksThatDisagreeGetAnErrorNamingBothCalls) {
  Fixture fx;
  auto c0 = fx.client(0, 2), c1 = fx.client(1, 2);
  auto f = std::async(std::launch::async, [&] { return errorOf([&] { c0->collective(allReduce({0, 1}, 0, 4096)); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string e1 = errorOf([&] { c1->collective(allReduce({0, 1}, 0, 8192)); });
  const std::string e0 = f.get();
  for (const std::string& e : {e0, e1}) {
    EXPECT_NE(e.find("disagree"), std::string::npos) << e;
    EXPECT_NE(e.find("8192"), std::string::npos) << e;
    EXPECT_NE(e.find("4096"), std::string::npos) << e;
  }
}

TEST(FabricServer, AReductionsMembersMustAgreeOnItsTypeAndOperation) {
  // Same bytes, another element type (or operation): Gloo would reduce garbage without a
  // word. Named where they differ; a member that says nothing (an older client) is not held to it.
  struct Case {
    const char *dtype0, *op0, *dtype1, *op1, *named0, *named1;
  };
  for (const Case& k : {Case{"float16", "sum", "bfloat16", "sum", "(float16, root", "(bfloat16, root"},
                        Case{"float32", "sum", "float32", "max", "(sum, root", "(max, root"}}) {
    Fixture fx;
    auto c0 = fx.client(0, 2), c1 = fx.client(1, 2);
    auto a0 = allReduce({0, 1}, 0, 4096), a1 = allReduce({0, 1}, 0, 4096);
    a0.dtype = k.dtype0, a0.reduce_op = k.op0, a1.dtype = k.dtype1, a1.reduce_op = k.op1;
    auto f = std::async(std::launch::async, [&] { return errorOf([&] { c0->collective(a0); }); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string e1 = errorOf([&] { c1->collective(a1); });
    const std::string e0 = f.get();
    for (const std::string& e : {e0, e1}) {
      EXPECT_NE(e.find("the ranks disagree"), std::string::npos) << e;
      EXPECT_NE(e.find(k.named0), std::string::npos) << e;
      EXPECT_NE(e.find(k.named1), std::string::npos) << e;
    }
  }
  Fixture fx;
  auto c0 = fx.client(0, 2), c1 = fx.client(1, 2);
  auto a0 = allReduce({0, 1}, 0, 4096), a1 = allReduce({0, 1}, 0, 4096);
  a0.dtype = "float32", a0.reduce_op = "sum";
  auto f = std::async(std::launch::async, [&] { return c0->collective(a0).end_ps; });
  const uint64_t end1 = c1->collective(a1).end_ps;
  EXPECT_EQ(end1, f.get());
}

TEST(FabricServer, AMemberThatCannotRunItFailsItOnEveryMemberAtOnce) {
  // Its library refused the call on it alone (an output of the wrong size): the others would
  // wait for transfers it never starts. Whichever arrives first, every member is told why.
  for (bool refuser_first : {false, true}) {
    Fixture fx;
    auto c0 = fx.client(0, 3), c1 = fx.client(1, 3), c2 = fx.client(2, 3);
    const std::vector<int> ranks = {0, 1, 2};
    auto ok = allReduce(ranks, 0, 4096, 60), refused = ok;
    refused.refused = "invalid tensor size";
    auto first = std::async(std::launch::async, [&] {
      return errorOf([&] { refuser_first ? c1->collective(refused) : c0->collective(ok); });
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto t0 = std::chrono::steady_clock::now();
    const std::string second = errorOf([&] { refuser_first ? c0->collective(ok) : c1->collective(refused); });
    const std::string third = errorOf([&] { c2->collective(ok); });   // after the failure: told at once
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    for (const std::string& e : {first.get(), second, third})
      EXPECT_NE(e.find("the ranks disagree: rank 1 cannot run it (invalid tensor size)"), std::string::npos) << e;
  }
}

TEST(FabricServer, AMemberArrivingAfterTheOthersDisagreedGetsTheirErrorAtOnce) {
  // Rank 0 calls an all_reduce, ranks 1 and 2 a broadcast: the first two to meet fail; the
  // third, arriving after, is told the same at once, not after the group's timeout.
  Fixture fx;
  auto c0 = fx.client(0, 3), c1 = fx.client(1, 3), c2 = fx.client(2, 3);
  const std::vector<int> ranks = {0, 1, 2};
  auto f = std::async(std::launch::async, [&] { return errorOf([&] { c0->collective(allReduce(ranks, 0, 4096, 60)); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto broadcast = allReduce(ranks, 0, 4096, 60);
  broadcast.op = "broadcast";
  const std::string e1 = errorOf([&] { c1->collective(broadcast); });
  const std::string e0 = f.get();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e2 = errorOf([&] { c2->collective(broadcast); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  for (const std::string& e : {e0, e1, e2}) {
    EXPECT_NE(e.find("#0 of process group [0, 1, 2]"), std::string::npos) << e;
    EXPECT_NE(e.find("the ranks disagree"), std::string::npos) << e;
    EXPECT_NE(e.find("broadcast"), std::string::npos) << e;
  }
}

TEST(FabricServer, ANonMemberAndAPresetMismatchAreRefused) {
  Fixture fx;
  auto c0 = fx.client(0, 4);
  const std::string e = errorOf([&] { c0->collective(allReduce({1, 2}, 0)); });
  EXPECT_NE(e.find("rank 0 is not a member"), std::string::npos) << e;
  const std::string p = errorOf([&] { FabricClient(fx.address, FabricClient::Identity{"job", 1, 4, "br100"}, 5); });
  EXPECT_NE(p.find("uses preset 'br100' but this fabric server models preset 'mlu370-x8'"), std::string::npos) << p;
}

namespace {

// Sends raw bytes and returns what the server answers before it closes the connection.
std::string rawExchange(uint16_t port, const std::string& bytes) {
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), port});
  asio::write(s, asio::buffer(bytes));
  std::string got;
  boost::system::error_code ec;
  char buf[4096];
  for (;;) {
    const size_t n = s.read_some(asio::buffer(buf), ec);
    if (ec) break;
    got.append(buf, n);
  }
  return got;
}

std::string errorMessageIn(const std::string& frames) {
  if (frames.size() < 4) return "";
  const uint32_t n = sim::wire::frameLength(reinterpret_cast<const unsigned char*>(frames.data()));
  fabric_rpc::ToClient m;
  if (!m.ParseFromString(frames.substr(4, n)) || !m.has_error()) return "";
  return m.error().message();
}

}  // namespace

TEST(FabricServer, AnotherProtocolVersionOrGarbageCostsThatConnectionOnly) {
  Fixture fx;
  auto c0 = fx.client(0, 2), c1 = fx.client(1, 2);
  fabric_rpc::ToServer hello;
  hello.mutable_hello()->set_protocol_version(sim::wire::kProtocolVersion + 1);
  hello.mutable_hello()->set_preset(kPreset);
  hello.mutable_hello()->set_world_size(1);
  const std::string v = errorMessageIn(rawExchange(fx.server.port(), sim::wire::frame(hello.SerializeAsString())));
  EXPECT_NE(v.find("protocol version " + std::to_string(sim::wire::kProtocolVersion + 1)), std::string::npos) << v;
  const std::string g = errorMessageIn(rawExchange(fx.server.port(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(g.find("not a cardsim fabric client"), std::string::npos) << g;
  std::string junk = sim::wire::frame(std::string("\xff\xff\xff\xff\x0f garbage", 14));
  const std::string m = errorMessageIn(rawExchange(fx.server.port(), junk));
  EXPECT_NE(m.find("malformed"), std::string::npos) << m;
  // The job's ranks were never disturbed.
  auto f = std::async(std::launch::async, [&] { return c0->collective(allReduce({0, 1}, 10)); });
  const auto done = c1->collective(allReduce({0, 1}, 20));
  EXPECT_EQ(done.end_ps, f.get().end_ps);
  EXPECT_EQ(done.end_ps, 20 + model::secondsToPs(aloneSeconds(1 << 20, {0, 1})));
}

TEST(FabricServer, AClientOfAnUnreachableServerGetsAClearError) {
  uint16_t port;
  {
    Fixture fx;
    port = fx.server.port();
    fx.server.stop();
  }
  const std::string e = errorOf([&] {
    FabricClient("127.0.0.1:" + std::to_string(port), FabricClient::Identity{"job", 0, 1, kPreset}, 0.3);
  });
  EXPECT_NE(e.find("cannot connect to the fabric server at 127.0.0.1:" + std::to_string(port)), std::string::npos) << e;
  const std::string bad = errorOf([] { FabricClient("no-port", FabricClient::Identity{"job", 0, 1, kPreset}, 0.3); });
  EXPECT_NE(bad.find("is not host:port"), std::string::npos) << bad;
  for (const char* port : {"99999", "0", "123456"}) {
    const std::string out = errorOf([&] {
      FabricClient(std::string("127.0.0.1:") + port, FabricClient::Identity{"job", 0, 1, kPreset}, 0.3);
    });
    EXPECT_NE(out.find(std::string("port ") + port + " is not 1..65535"), std::string::npos) << out;
  }
}

TEST(FabricServer, CollectivesOfTwoGroupsOverlappingInTimeShareTheLinksTheyCross) {
  // Chips 0, 1 on card 0 and 2, 3 on card 1: groups {0, 2} and {1, 3} both cross the link
  // between the cards.
  Fixture fx;
  std::vector<std::unique_ptr<FabricClient>> clients;
  for (uint32_t r = 0; r < 4; ++r) clients.push_back(fx.client(r, 4));
  const double bytes = 64.0 * (1 << 20);
  const std::vector<int> a = {0, 2}, b = {1, 3};
  sim::FabricModel model(params());
  auto run = [&](uint64_t a_at, uint64_t b_at) {
    std::vector<std::future<FabricClient::Completion>> done(4);
    for (int r : {3, 0, 2, 1}) {   // the wall-clock order does not matter
      auto c = allReduce(r % 2 ? b : a, r % 2 ? b_at : a_at, bytes);
      c.group = r % 2 ? "b" : "a";
      c.seq = clients[r]->nextSeq(c.group);
      done[r] = std::async(std::launch::async, [&clients, r, c] { return clients[r]->collective(c); });
    }
    std::vector<uint64_t> ends;
    for (auto& d : done) ends.push_back(d.get().end_ps);
    EXPECT_EQ(ends[0], ends[2]);
    EXPECT_EQ(ends[1], ends[3]);
    return std::make_pair(ends[0], ends[1]);
  };
  const double alone = aloneSeconds(bytes, a);
  ASSERT_NEAR(alone, aloneSeconds(bytes, b), 1e-15);
  // At once: each gets the model's shared time, about twice its time alone.
  const uint64_t t0 = 1'000'000;
  const auto both = run(t0, t0);
  std::vector<sim::FabricModel::Request> together(2);
  together[0].ranks = a;
  together[1].ranks = b;
  together[0].bytes = together[1].bytes = bytes;
  const std::vector<double> shared = model.timeTogether(together);
  EXPECT_EQ(both.first, t0 + model::secondsToPs(shared[0]));
  EXPECT_EQ(both.second, t0 + model::secondsToPs(shared[1]));
  EXPECT_GT(shared[0], 1.8 * alone);
  // Group b starting half way through group a's: each slowed by the overlap only.
  const uint64_t t1 = both.second + 1'000'000;
  const uint64_t half = model::secondsToPs(alone / 2);
  const auto staggered = run(t1, t1 + half);
  together[1].release_s = static_cast<double>(half) * 1e-12;
  const std::vector<double> partly = model.timeTogether(together);
  EXPECT_EQ(staggered.first, t1 + model::secondsToPs(partly[0]));
  EXPECT_EQ(staggered.second, t1 + half + model::secondsToPs(partly[1]));
  EXPECT_GT(staggered.first, t1 + model::secondsToPs(alone) + half / 4);
  EXPECT_LT(staggered.first, both.first - t0 + t1);
  // Apart in time: each alone.
  const uint64_t t2 = staggered.second + 1'000'000;
  const auto apart = run(t2, t2 + 2 * model::secondsToPs(alone));
  EXPECT_EQ(apart.first, t2 + model::secondsToPs(alone));
  EXPECT_EQ(apart.second, t2 + 2 * model::secondsToPs(alone) + model::secondsToPs(alone));
}

namespace {

// Ranks 0 and 1 (chips 0 and 1 of card 0) all-reduce `bytes` in `group`, arriving at `at`
// with their simulations let run to sealed[r]; each rank's completion (their ends agree).
std::array<FabricClient::Completion, 2> pairAllReduce(std::vector<std::unique_ptr<FabricClient>>& clients,
                                                      const std::string& group, uint64_t at, double bytes,
                                                      std::array<uint64_t, 2> sealed = {0, 0}) {
  std::vector<std::future<FabricClient::Completion>> done(2);
  for (int r : {1, 0}) {   // the wall-clock order does not matter
    auto c = allReduce({0, 1}, at, bytes);
    c.group = group;
    c.seq = clients[r]->nextSeq(group);
    c.sealed_ps = sealed[r];
    done[r] = std::async(std::launch::async, [&clients, r, c] { return clients[r]->collective(c); });
  }
  std::array<FabricClient::Completion, 2> out{done[0].get(), done[1].get()};
  EXPECT_EQ(out[0].end_ps, out[1].end_ps);
  return out;
}

}  // namespace

TEST(FabricServer, APeerCopyReportedBeforeACollectiveSharesTheLinksWithIt) {
  // Chips 0 and 1 of card 0: rank 0's process copies chip 0 -> chip 1 over their on-card
  // link, then both ranks all-reduce over it. The all-reduce gets the model's time shared
  // with the copy (a send_recv from the copy's start), on both ranks; one far later, alone.
  Fixture fx;
  std::vector<std::unique_ptr<FabricClient>> clients;
  for (uint32_t r = 0; r < 2; ++r) clients.push_back(fx.client(r, 2));
  const double bytes = 64.0 * (1 << 20);
  const std::vector<int> ranks = {0, 1};
  const uint64_t t0 = 2'000'000, copy_at = 1'000'000;
  auto run = [&](uint64_t at) { return pairAllReduce(clients, "g", at, bytes)[0].end_ps; };
  clients[0]->traffic(0, 1, bytes, copy_at);
  const uint64_t shared_end = run(t0);
  sim::FabricModel model(params());
  std::vector<sim::FabricModel::Request> together(2);
  together[0].op = fabric::CollectiveOp::SendRecv;
  together[0].ranks = {0, 1};
  together[0].root = 0;
  together[0].peer = 1;
  together[0].bytes = bytes;
  together[1].ranks = ranks;
  together[1].bytes = bytes;
  together[1].release_s = static_cast<double>(t0 - copy_at) * 1e-12;
  const std::vector<double> shared = model.timeTogether(together);
  const double alone = aloneSeconds(bytes, ranks);
  EXPECT_EQ(shared_end, t0 + model::secondsToPs(shared[1]));
  EXPECT_GT(shared[1], alone * 1.2);   // the copy takes half of one direction for a while
  // Long after the copy: alone again.
  const uint64_t t1 = shared_end + model::secondsToPs(10 * alone);
  EXPECT_EQ(run(t1), t1 + model::secondsToPs(alone));
  // A copy to itself is a malformed message: that connection is refused, the server goes on.
  auto bad = fx.client(0, 1, "other");
  bad->traffic(3, 3, bytes, 0);
  const std::string why = errorOf([&] { (void)bad->collective(allReduce({0}, 0)); });
  EXPECT_NE(why.find("Traffic needs two different"), std::string::npos) << why;
  EXPECT_EQ(run(t1 + 1'000'000'000ull), t1 + 1'000'000'000ull + model::secondsToPs(alone));
}

TEST(FabricServer, APeerCopyIsInFlightForItsOwnTimeNotACollectives) {
  // On a100-sxm a copy goes at NVLink's packet-format share (fabric.link.copy_efficiency)
  // after the route's latency, while a send/recv adds the library's latency and takes the
  // collectives' efficiency: a collective starting just after the copy ends runs alone.
  sim::SimOptions o;
  o.preset = "a100-sxm";
  const fabric::FabricParams p = sim::loadFabricParams(o);
  FabricServer server{p, FabricServer::Options{"a100-sxm", "127.0.0.1", 0, false}};
  server.start();
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  std::vector<std::unique_ptr<FabricClient>> clients;
  for (uint32_t r = 0; r < 2; ++r)
    clients.push_back(std::make_unique<FabricClient>(address, FabricClient::Identity{"job", r, 2, "a100-sxm"}, 5));
  const double bytes = 256.0 * (1 << 20);
  sim::FabricModel model(p);
  const double copy_s = model.copySeconds(0, 1, bytes);
  const double as_send = model.time(fabric::CollectiveOp::SendRecv, bytes, {0, 1}, 0, 1, "").seconds;
  ASSERT_LT(copy_s * 1.05, as_send);
  // route latency (link, switch, link) and the copy rate: the link's bandwidth x 0.889
  fabric::LinkParams link = p.link;
  EXPECT_NEAR(copy_s, model.copySeconds(0, 1, 0) + bytes / link.copyBandwidth(), 1e-12);
  const double alone = model.time(fabric::CollectiveOp::AllReduce, bytes, {0, 1}, 0, 1, "").seconds;
  const uint64_t at = 1'000'000;
  clients[0]->traffic(0, 1, bytes, at);
  const uint64_t after = at + model::secondsToPs(copy_s) + 1;
  EXPECT_EQ(pairAllReduce(clients, "g", after, bytes)[0].end_ps, after + model::secondsToPs(alone));
}

TEST(FabricServer, AnAnswerALaterCollectiveOverlapsMovesLaterWhileEveryMemberCanStillMoveIt) {
  // Chips 0 and 1 of card 0, two process groups of both (a rank's two streams): group b's
  // all-reduce starts half way through group a's, whose answer is out already. Both ranks
  // report their simulation short of a's end (Arrive.sealed_ps): a's end moves to where
  // sharing the links with b puts it (a Revise before b's answer, on both ranks), and b gets
  // its shared time. A rank whose simulation may have passed a's end keeps it there.
  Fixture fx;
  std::vector<std::unique_ptr<FabricClient>> clients;
  for (uint32_t r = 0; r < 2; ++r) clients.push_back(fx.client(r, 2));
  const double bytes = 64.0 * (1 << 20);
  const std::vector<int> ranks = {0, 1};
  const double alone = aloneSeconds(bytes, ranks);
  const uint64_t half = model::secondsToPs(alone / 2);
  auto run = [&](const std::string& group, uint64_t at, std::array<uint64_t, 2> sealed) {
    return pairAllReduce(clients, group, at, bytes, sealed);
  };
  sim::FabricModel model(params());
  std::vector<sim::FabricModel::Request> together(2);
  together[0].ranks = together[1].ranks = ranks;
  together[0].bytes = together[1].bytes = bytes;
  together[1].release_s = static_cast<double>(half) * 1e-12;
  const std::vector<double> shared = model.timeTogether(together);
  ASSERT_GT(shared[0], alone * 1.2);

  const uint64_t t0 = 1'000'000;
  const auto a = run("a", t0, {0, 0});
  EXPECT_EQ(a[0].end_ps, t0 + model::secondsToPs(alone));   // alone when answered
  EXPECT_TRUE(a[0].revised.empty());
  const auto b = run("b", t0 + half, {t0, t0 + half});
  EXPECT_EQ(b[0].end_ps, t0 + half + model::secondsToPs(shared[1]));
  for (int r : {0, 1}) {
    ASSERT_EQ(b[r].revised.size(), 1u) << "rank " << r;
    EXPECT_EQ(b[r].revised[0].group, "a");
    EXPECT_EQ(b[r].revised[0].seq, 0u);
    EXPECT_EQ(b[r].revised[0].end_ps, t0 + model::secondsToPs(shared[0]));
  }
  EXPECT_EQ(fx.server.stats().collectives_revised, 1u);

  // Again, but rank 1's simulation may have run to a's end (a synchronization after it):
  // a keeps its answer, and b still shares the links with it.
  const uint64_t t1 = b[0].end_ps + model::secondsToPs(10 * alone);
  const auto a2 = run("a", t1, {b[0].end_ps, b[0].end_ps});
  EXPECT_EQ(a2[0].end_ps, t1 + model::secondsToPs(alone));
  const auto b2 = run("b", t1 + half, {t1, a2[0].end_ps});
  EXPECT_EQ(b2[0].end_ps, t1 + half + model::secondsToPs(shared[1]));
  EXPECT_TRUE(b2[0].revised.empty());
  EXPECT_TRUE(b2[1].revised.empty());
  EXPECT_EQ(fx.server.stats().collectives_revised, 1u);
}

namespace {

// A server with the given settle time and three connected ranks, of which 0 and 1 run
// all-reduces together (each call returns its wall seconds).
struct ThreeRanks {
  FabricServer server;
  std::vector<std::unique_ptr<FabricClient>> clients;
  explicit ThreeRanks(double settle_s) : server(params(), options(settle_s)) {
    server.start();
    const std::string address = "127.0.0.1:" + std::to_string(server.port());
    for (uint32_t r = 0; r < 3; ++r)
      clients.push_back(std::make_unique<FabricClient>(address, FabricClient::Identity{"job", r, 3, kPreset}, 5));
  }
  ~ThreeRanks() { server.stop(1.0); }
  static FabricServer::Options options(double settle_s) {
    FabricServer::Options o{kPreset, "127.0.0.1", 0, false};
    o.settle_s = settle_s;
    return o;
  }
  double pairAllReduce(uint64_t at, uint64_t* end_ps = nullptr) {
    const auto w0 = std::chrono::steady_clock::now();
    std::vector<std::future<FabricClient::Completion>> done;
    for (int r : {0, 1}) {
      auto c = allReduce({0, 1}, at);
      c.seq = clients[r]->nextSeq(c.group);
      done.push_back(std::async(std::launch::async, [this, r, c] { return clients[r]->collective(c); }));
    }
    const uint64_t e0 = done[0].get().end_ps;
    EXPECT_EQ(e0, done[1].get().end_ps);
    if (end_ps) *end_ps = e0;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  }
};

}  // namespace

TEST(FabricServer, ARankBusyElsewhereHoldsTheOthersOnceForTheSettleTime) {
  ThreeRanks job(1.0);
  // Rank 2 is connected but never reports: the group {0, 1} waits for it once, then not.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GT(job.pairAllReduce(1'000'000), 0.8);       // held until rank 2 had been busy for the settle time
  EXPECT_LT(job.pairAllReduce(1'000'000'000), 0.8);   // rank 2 now counts as away
}

TEST(FabricServer, AParkedRankCountsAsWaiting) {
  ThreeRanks job(30);   // holding the collective for rank 2 would show
  job.clients[2]->park(true);
  uint64_t end = 0;
  EXPECT_LT(job.pairAllReduce(1'000'000, &end), 15.0);
  EXPECT_EQ(end, 1'000'000 + model::secondsToPs(aloneSeconds(1 << 20, {0, 1})));
}

TEST(FabricServer, AnAbsurdSizeOrARankOutsideTheJobIsRefusedAndTheServerGoesOn) {
  // Sizes past the model's limit (where double-precision times stop moving) and groups
  // naming ranks the job does not have (they would be waited for forever) get an error at
  // once; the server keeps serving.
  Fixture fx;
  auto c0 = fx.client(0, 2), c1 = fx.client(1, 2);
  for (double bytes : {1e30, std::numeric_limits<double>::infinity()}) {
    auto f = std::async(std::launch::async, [&] { return errorOf([&] { c0->collective(allReduce({0, 1}, 0, bytes)); }); });
    const std::string e1 = errorOf([&] { c1->collective(allReduce({0, 1}, 0, bytes)); });
    ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "the server hangs on " << bytes;
    const std::string e0 = f.get();
    for (const std::string& e : {e0, e1}) EXPECT_NE(e.find("over the model's limit"), std::string::npos) << e;
  }
  // An arrival past 2^63 ps: its end would wrap around to before it.
  auto late = allReduce({0, 1}, ~uint64_t{0} - 1000, 1 << 20);
  late.group = "late";
  const std::string el = errorOf([&] { c0->collective(late); });
  EXPECT_NE(el.find("past the simulation's end (2^63 ps)"), std::string::npos) << el;
  auto outside = allReduce({0, 5}, 0, 4096);
  outside.group = "outside";
  const std::string e = errorOf([&] { c0->collective(outside); });
  EXPECT_NE(e.find("rank 5 is outside the job's world of 2"), std::string::npos) << e;
  auto ok = allReduce({0, 1}, 0, 4096);
  ok.group = "after";
  auto f = std::async(std::launch::async, [&] { return c0->collective(ok); });
  const auto done = c1->collective(ok);
  EXPECT_EQ(f.get().end_ps, done.end_ps);
  EXPECT_GT(done.end_ps, 0u);
}

TEST(FabricServer, LosingTheServerNamesTheCollectiveUnderWay) {
  // Rank 0's process hosts the server: when it dies, the others learn which collective of
  // which group was cut off, not only that a socket closed.
  auto fx = std::make_unique<Fixture>();
  auto c1 = fx->client(1, 2);
  auto f = std::async(std::launch::async, [&] { return errorOf([&] { c1->collective(allReduce({0, 1}, 0, 4096, 60)); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  fx->server.stop(2.0);   // closes every connection, as the death of its process does
  const std::string e = f.get();
  EXPECT_NE(e.find("all_reduce #0 of process group [0, 1]"), std::string::npos) << e;
  EXPECT_NE(e.find("closed the connection"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 0, when the job started it"), std::string::npos) << e;
}

TEST(FabricServer, AClientGivesUpOnASilentListenerWithinItsTimeout) {
  // Something listens but never answers the hello: the rank's connect timeout (the process
  // group's) bounds the wait.
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  const uint16_t port = acceptor.local_endpoint().port();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = errorOf([&] {
    FabricClient("127.0.0.1:" + std::to_string(port), FabricClient::Identity{"job", 0, 1, kPreset}, 1.5);
  });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(e.find("no answer from 127.0.0.1:" + std::to_string(port)), std::string::npos) << e;
  EXPECT_LT(took, 5.0);
  EXPECT_GE(took, 1.4);
}

TEST(FabricServer, ARankWhoseFabricDiffersFromTheServersIsRefusedNamingTheKey) {
  // A fabricd started without the ranks' --set overrides would time their collectives on
  // another fabric: the hello carries the rank's parameters, and a difference is named.
  Fixture fx;
  fabric::FabricParams mine = params();
  mine.link.latency_s += 50e-6;
  FabricClient::Identity who{"job", 0, 2, kPreset, fabric::fabricSignature(mine)};
  const std::string e = errorOf([&] { FabricClient(fx.address, who, 5); });
  EXPECT_NE(e.find("model different fabrics"), std::string::npos) << e;
  EXPECT_NE(e.find("fabric.link.latency"), std::string::npos) << e;
  // Values are shown as people write them, not to the last binary digit.
  fabric::FabricParams faster = params();
  faster.link.bandwidth_bytes_per_s = 40e9;   // the preset's is 33.3e9, 33299999999.999996 exactly
  const std::string b = errorOf([&] {
    FabricClient(fx.address, FabricClient::Identity{"job", 0, 2, kPreset, fabric::fabricSignature(faster)}, 5);
  });
  EXPECT_NE(b.find("fabric.link.bandwidth: "), std::string::npos) << b;
  EXPECT_NE(b.find("fabric.link.bandwidth: 4e+10 vs 3.33e+10"), std::string::npos) << b;
  EXPECT_EQ(b.find("33299999999"), std::string::npos) << b;
  // The same parameters (the node count aside) are welcome.
  fabric::FabricParams same = params();
  same.nodes = 7;
  FabricClient ok(fx.address, FabricClient::Identity{"job", 1, 2, kPreset, fabric::fabricSignature(same)}, 5);
  EXPECT_EQ(ok.address(), fx.address);
}

TEST(FabricServer, OneConnectionServesSeveralThreadsEachWithItsOwnAnswer) {
  // A rank's host threads share its one connection: whichever waits reads the socket and
  // hands the others their answers. Three groups over the same two ranks, far apart in
  // simulated time (no sharing of links), with different sizes: each thread must get the
  // end of its own collective, whichever thread happened to read it.
  Fixture fx;
  std::vector<std::unique_ptr<FabricClient>> clients;
  for (uint32_t r = 0; r < 2; ++r) clients.push_back(fx.client(r, 2));
  const double bytes[3] = {4096, 1 << 20, 64 << 20};
  for (int round = 0; round < 5; ++round) {
    std::vector<std::future<FabricClient::Completion>> done;
    std::vector<uint64_t> expected;
    for (int r = 0; r < 2; ++r)
      for (int g = 0; g < 3; ++g) {
        const uint64_t arrival = static_cast<uint64_t>(round * 3 + g) * 1'000'000'000'000ull + static_cast<uint64_t>(r);
        auto c = allReduce({0, 1}, arrival, bytes[g]);
        c.group = "g" + std::to_string(g);
        c.seq = clients[static_cast<size_t>(r)]->nextSeq(c.group);
        expected.push_back(static_cast<uint64_t>(round * 3 + g) * 1'000'000'000'000ull + 1 +
                           model::secondsToPs(aloneSeconds(bytes[g], {0, 1})));
        FabricClient* client = clients[static_cast<size_t>(r)].get();
        done.push_back(std::async(std::launch::async, [client, c, round, g] {
          // Different threads reach the socket first in different rounds.
          std::this_thread::sleep_for(std::chrono::milliseconds((round + g) % 3 * 5));
          return client->collective(c);
        }));
      }
    for (size_t i = 0; i < done.size(); ++i)
      EXPECT_EQ(done[i].get().end_ps, expected[i]) << "round " << round << " rank " << i / 3 << " group g" << i % 3;
  }
  EXPECT_EQ(fx.server.stats().collectives_completed, 15u);
}

TEST(FabricServer, TheRankHostingTheServerHearsLastSoItsExitCannotCutTheOthersShort) {
  // The job's rank 0 hosts its server; a program may end its process right after its last
  // collective (os._exit skips the handler that keeps the server up). The answers of a
  // collective go out member by member, the ranks in the server's own process last (asio
  // writes each at once when it can), so that when the host has its answer, the others'
  // are already written.
  sim::FabricServer::Impl impl(params(), FabricServer::Options{kPreset, "127.0.0.1", 0, false});
  sim::Pending p;
  std::vector<std::shared_ptr<sim::Session>> sessions;
  for (int r = 0; r < 4; ++r) {
    sessions.push_back(std::make_shared<sim::Session>(impl, sim::Socket(impl.io), "test", true));
    sessions.back()->rank = r;
    sessions.back()->in_server_process = r == 0 || r == 2;   // the host, and a rank it also drives
    p.arrived[r] = sim::Pending::Arrival{sessions.back(), static_cast<uint64_t>(10 + r), 0, true};
  }
  sessions[3].reset();   // gone: skipped
  p.arrived[3].session = sessions[3];
  std::vector<int> order;
  sim::forEachHostLast(p, [&](sim::Session& s, const sim::Pending::Arrival& a) {
    order.push_back(s.rank);
    EXPECT_EQ(a.id, static_cast<uint64_t>(10 + s.rank));
  });
  EXPECT_EQ(order, (std::vector<int>{1, 0, 2}));
}

TEST(FabricServer, ARankInAnotherProcessAndTheHostBothGetTheirAnswers) {
  // The Hello's pid tells the server which rank lives in its own process; a rank that says
  // it lives elsewhere (a raw connection here) is answered as before, with the same end.
  Fixture fx;
  auto host = fx.client(0, 2);
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ip::tcp::socket other(io);
  other.connect({asio::ip::make_address("127.0.0.1"), fx.server.port()});
  auto sendMessage = [&](const fabric_rpc::ToServer& m) {
    asio::write(other, asio::buffer(sim::wire::frame(m.SerializeAsString())));
  };
  auto readMessage = [&] {
    unsigned char h[4];
    asio::read(other, asio::buffer(h, 4));
    std::string body(sim::wire::frameLength(h), '\0');
    asio::read(other, asio::buffer(body));
    fabric_rpc::ToClient m;
    EXPECT_TRUE(m.ParseFromString(body));
    return m;
  };
  fabric_rpc::ToServer hello;
  auto* h = hello.mutable_hello();
  h->set_protocol_version(sim::wire::kProtocolVersion);
  h->set_job("job");
  h->set_rank(1);
  h->set_world_size(2);
  h->set_preset(kPreset);
  h->set_pid(static_cast<uint32_t>(::getpid()) + 1);
  sendMessage(hello);
  ASSERT_TRUE(readMessage().has_welcome());
  for (int i = 0; i < 20; ++i) {
    fabric_rpc::ToServer arrive;
    auto* a = arrive.mutable_arrive();
    a->set_id(100 + static_cast<uint64_t>(i));
    a->set_group("g");
    a->add_ranks(0);
    a->add_ranks(1);
    a->set_seq(static_cast<uint64_t>(i));
    a->set_op("all_reduce");
    a->set_bytes(4096);
    a->set_arrival_ps(static_cast<uint64_t>(i) * 1'000'000'000ull);
    a->set_timeout_ms(10'000);
    sendMessage(arrive);
    auto c = allReduce({0, 1}, static_cast<uint64_t>(i) * 1'000'000'000ull, 4096);
    c.seq = host->nextSeq(c.group);
    const uint64_t end = host->collective(c).end_ps;
    const fabric_rpc::ToClient m = readMessage();
    ASSERT_TRUE(m.has_complete()) << i;
    EXPECT_EQ(m.complete().id(), 100u + static_cast<uint64_t>(i));
    EXPECT_EQ(m.complete().end_ps(), end);
  }
}

TEST(FabricNames, AGroupPastTheFirstOverTheSameRanksIsToldApart) {
  using cardsim::sim::groupInstanceNote;
  EXPECT_EQ(groupInstanceNote("0,1,2#0"), "");
  EXPECT_EQ(groupInstanceNote("0,1,2#1"), " (the 2nd group created over these ranks)");
  EXPECT_EQ(groupInstanceNote("0,1#2 p2p 0>1 tag 0"), " (the 3rd group created over these ranks)");
  EXPECT_EQ(groupInstanceNote("0,1#10"), " (the 11th group created over these ranks)");
  EXPECT_EQ(groupInstanceNote("0,1#20"), " (the 21st group created over these ranks)");
  EXPECT_EQ(groupInstanceNote("0,1"), "");
  EXPECT_EQ(groupInstanceNote("0,1#"), "");
  EXPECT_EQ(groupInstanceNote("0,1#999999999999999999999999"), "");   // from a client: no throw
}
