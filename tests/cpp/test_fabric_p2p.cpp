// Point-to-point transfers on the fabric server: a send is reported without waiting; its
// receive completes at the later of the two arrivals plus the model's time for the
// transfer, whichever side reaches the server first; faults reach the side that waits, and
// the sender's next call.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "device_models/Command.h"
#include "simulator/FabricClient.h"
#include "simulator/FabricConfig.h"
#include "simulator/FabricModel.h"
#include "simulator/FabricServer.h"

using namespace cardsim;
using sim::FabricClient;
using sim::FabricServer;

namespace {

const char* kPreset = "mlu370-x8";

fabric::FabricParams params() {
  sim::SimOptions o;
  o.preset = kPreset;
  return sim::loadFabricParams(o);
}

// Settle time far above the test's duration: a point-to-point answer must not wait for one.
struct Job {
  FabricServer server{params(), FabricServer::Options{kPreset, "127.0.0.1", 0, false, 60.0}};
  std::vector<std::unique_ptr<FabricClient>> clients;
  explicit Job(uint32_t world) {
    server.start();
    const std::string address = "127.0.0.1:" + std::to_string(server.port());
    for (uint32_t r = 0; r < world; ++r)
      clients.push_back(std::make_unique<FabricClient>(address, FabricClient::Identity{"job", r, world, kPreset}, 5));
  }
};

// The two sides of rank `src` sending `bytes` to rank `dst`, as the shim reports them.
FabricClient::Collective side(int src, int dst, uint64_t arrival_ps, double bytes, int tag = 0, double timeout_s = 10) {
  FabricClient::Collective c;
  c.group = "g p2p " + std::to_string(src) + ">" + std::to_string(dst) + " tag " + std::to_string(tag);
  c.ranks = {src, dst};
  c.op = "send_recv";
  c.bytes = bytes;
  c.root = 0;
  c.peer = 1;
  c.arrival_ps = arrival_ps;
  c.timeout_s = timeout_s;
  return c;
}

double transferSeconds(double bytes, int src, int dst) {
  sim::FabricModel m(params());
  return m.time(fabric::CollectiveOp::SendRecv, bytes, {src, dst}, 0, 1, "").seconds;
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

TEST(FabricPointToPoint, AReceiveEndsAtTheLaterArrivalPlusTheTransferWhicheverSideComesFirst) {
  Job job(2);
  const double bytes = 8 << 20;
  const uint64_t t = model::secondsToPs(transferSeconds(bytes, 0, 1));
  ASSERT_GT(t, 0u);
  // Sender late in simulated time (the receiver waits for it), then the receiver late (the
  // data is there when it asks); each once with the sender reaching the server first in
  // wall time and once with the receiver first.
  struct Case {
    uint64_t send_ps, recv_ps;
    bool sender_first;
  };
  const Case cases[] = {{9'000'000, 2'000'000, true}, {9'000'000, 2'000'000, false},
                        {3'000'000, 7'000'000, true}, {3'000'000, 7'000'000, false}};
  uint64_t seq = 0;
  for (const Case& k : cases) {
    auto send = side(0, 1, k.send_ps, bytes);
    auto recv = side(0, 1, k.recv_ps, bytes);
    send.seq = job.clients[0]->nextSeq(send.group);
    recv.seq = job.clients[1]->nextSeq(recv.group);
    ASSERT_EQ(send.seq, seq);
    ASSERT_EQ(recv.seq, seq);
    ++seq;
    std::future<FabricClient::Completion> done;
    if (k.sender_first) {
      job.clients[0]->post(send);   // returns at once: nothing waits for the receiver
      done = std::async(std::launch::async, [&] { return job.clients[1]->collective(recv); });
    } else {
      done = std::async(std::launch::async, [&] { return job.clients[1]->collective(recv); });
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      EXPECT_EQ(done.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout)
          << "the receive completed before its send was reported";
      job.clients[0]->post(send);
    }
    ASSERT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "held for a settle";
    EXPECT_EQ(done.get().end_ps, std::max(k.send_ps, k.recv_ps) + t)
        << "send at " << k.send_ps << ", receive at " << k.recv_ps << (k.sender_first ? ", sender first" : ", receiver first");
  }
  EXPECT_EQ(job.server.stats().collectives_completed, 4u);
  EXPECT_EQ(job.server.stats().collectives_pending, 0u);
}

TEST(FabricPointToPoint, AnExchangeWhereEachRankPostsItsReceiveFirstCompletes) {
  // Ranks 0 and 1 swap buffers; each reports its send, then waits for its receive: with
  // sends that never wait, neither rank holds the other.
  Job job(2);
  const double bytes = 1 << 20;
  const uint64_t t = model::secondsToPs(transferSeconds(bytes, 0, 1));
  auto rank = [&](int me, uint64_t at) {
    const int other = 1 - me;
    auto send = side(me, other, at, bytes, 7);
    send.seq = job.clients[me]->nextSeq(send.group);
    job.clients[me]->post(send);
    auto recv = side(other, me, at, bytes, 7);
    recv.seq = job.clients[me]->nextSeq(recv.group);
    return job.clients[me]->collective(recv).end_ps;
  };
  auto a = std::async(std::launch::async, rank, 0, 1'000'000);
  auto b = std::async(std::launch::async, rank, 1, 4'000'000);
  ASSERT_EQ(a.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  ASSERT_EQ(b.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(a.get(), 4'000'000 + t);   // rank 0's data left rank 1 at 4 us
  EXPECT_EQ(b.get(), 4'000'000 + t);   // rank 1 posted its receive at 4 us
}

TEST(FabricPointToPoint, TagsAndDirectionsAreMatchedSeparatelyInCallOrder) {
  Job job(3);
  const uint64_t t_small = model::secondsToPs(transferSeconds(4096, 0, 2));
  // Rank 0 sends tag 1 then tag 2 to rank 2; rank 1 sends to rank 2 too. Rank 2 receives in
  // another order: each receive still pairs with its own send.
  auto post = [&](int src, int tag, uint64_t at) {
    auto s = side(src, 2, at, 4096, tag);
    s.seq = job.clients[src]->nextSeq(s.group);
    job.clients[src]->post(s);
  };
  post(0, 1, 1'000'000);
  post(0, 2, 2'000'000);
  post(1, 1, 3'000'000);
  auto recv = [&](int src, int tag) {
    auto r = side(src, 2, 0, 4096, tag);
    r.seq = job.clients[2]->nextSeq(r.group);
    return job.clients[2]->collective(r).end_ps;
  };
  EXPECT_EQ(recv(1, 1), 3'000'000 + model::secondsToPs(transferSeconds(4096, 1, 2)));
  EXPECT_EQ(recv(0, 2), 2'000'000 + t_small);
  EXPECT_EQ(recv(0, 1), 1'000'000 + t_small);
}

TEST(FabricPointToPoint, AReceiveWhoseSenderNeverComesTimesOutNamingIt) {
  Job job(2);
  auto r = side(0, 1, 0, 4096, 0, 0.5);
  r.seq = job.clients[1]->nextSeq(r.group);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = errorOf([&] { job.clients[1]->collective(r); });
  EXPECT_NE(e.find("send_recv #0"), std::string::npos) << e;
  EXPECT_NE(e.find("timed out"), std::string::npos) << e;
  EXPECT_NE(e.find("rank(s) [0]"), std::string::npos) << e;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(FabricPointToPoint, ASendWhoseReceiverLeftFailsTheSendersNextCall) {
  Job job(2);
  auto s = side(0, 1, 0, 4096);
  s.seq = job.clients[0]->nextSeq(s.group);
  job.clients[0]->post(s);
  job.clients[1]->close();   // rank 1 exits without receiving
  // The server tells rank 0 about its send; its next call raises it.
  std::string e;
  for (int i = 0; i < 100 && e.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto next = side(0, 1, 0, 4096);
    next.group = "other";
    e = errorOf([&] { job.clients[0]->post(next); });
  }
  EXPECT_NE(e.find("an earlier send failed"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 1 left the job"), std::string::npos) << e;
}

TEST(FabricPointToPoint, AReceiveCompletesWhenItsSenderPostedThenLeft) {
  // A send never waits: its process may finish and exit before the receiver reaches the
  // server (a replay's last stage does). The receive still completes from the send's arrival.
  Job job(2);
  const double bytes = 1 << 20;
  auto send = side(0, 1, 5'000'000, bytes);
  auto recv = side(0, 1, 1'000'000, bytes);
  send.seq = job.clients[0]->nextSeq(send.group);
  recv.seq = job.clients[1]->nextSeq(recv.group);
  job.clients[0]->post(send);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));   // the send is in
  job.clients[0]->close();
  for (int i = 0; i < 100 && job.server.stats().connections_open > 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(job.server.stats().connections_open, 1u);
  const FabricClient::Completion done = job.clients[1]->collective(recv);
  EXPECT_EQ(done.end_ps, 5'000'000 + model::secondsToPs(transferSeconds(bytes, 0, 1)));
  // A receive of a send that was never posted still fails naming the rank that left.
  auto late = side(0, 1, 0, bytes);
  late.seq = job.clients[1]->nextSeq(late.group);
  const std::string e = errorOf([&] { job.clients[1]->collective(late); });
  EXPECT_NE(e.find("rank 0 left the job"), std::string::npos) << e;
}

TEST(FabricPointToPoint, SendsPostedJustBeforeTheSenderLeavesStillReachTheirReceiver) {
  // A replayed rank posts its last sends and leaves at once (as a process ending by _exit
  // after closing its connection): closing writes what was posted before it shuts down.
  Job job(2);
  const int n = 50;
  std::vector<FabricClient::Collective> recvs;
  for (int i = 0; i < n; ++i) {
    auto send = side(0, 1, 1'000'000, 4096);
    auto recv = side(0, 1, 1'000'000, 4096);
    send.seq = job.clients[0]->nextSeq(send.group);
    recv.seq = job.clients[1]->nextSeq(recv.group);
    job.clients[0]->post(send);
    recvs.push_back(recv);
  }
  job.clients[0]->close();
  for (int i = 0; i < n; ++i)
    EXPECT_EQ(errorOf([&] { job.clients[1]->collective(recvs[static_cast<size_t>(i)]); }), "") << "receive " << i;
  EXPECT_EQ(job.server.stats().collectives_completed, static_cast<uint64_t>(n));
}
