// Collectives answered later (CollectiveDesc::answer_later, shim fabricSettle): the host
// returns before the fabric server has heard every member, the simulation never runs past
// such a collective unanswered, and the end on the card is the server's, as when the call
// waited. Rank 0 is this process's runtime; rank 1 a bare fabric client in a thread.
#include <chrono>
#include <future>
#include <thread>

#include "ShimTestUtil.h"
#include "simulator/FabricClient.h"

using namespace cardsim;

namespace {

constexpr const char* kPreset = "mlu370-x8";

struct Job {
  std::string address;
  std::unique_ptr<sim::FabricClient> rank1;
  Job() {
    cardsim::testing::startRuntime(kPreset, 1);
    uint16_t port = 0;
    EXPECT_SHIM_OK(shim::fabricServe("127.0.0.1", 0, &port));
    address = "127.0.0.1:" + std::to_string(port);
    EXPECT_SHIM_OK(shim::fabricConnect(address, "job", 0, 2, 10));
    rank1 = std::make_unique<sim::FabricClient>(address, sim::FabricClient::Identity{"job", 1, 2, kPreset}, 10);
  }
};

shim::CollectiveDesc allReduce(double bytes, bool later) {
  shim::CollectiveDesc d;
  d.op = "all_reduce";
  d.bytes = bytes;
  d.ranks = {0, 1};
  d.group = "g";
  d.timeout_s = 10;
  d.answer_later = later;
  return d;
}

// Rank 1's side of the group's next all_reduce, arriving at `arrival_ps`, answered in a thread.
std::future<sim::FabricClient::Completion> rank1AllReduce(sim::FabricClient& c, double bytes, uint64_t arrival_ps) {
  sim::FabricClient::Collective x;
  x.group = "g";
  x.ranks = {0, 1};
  x.seq = c.nextSeq("g");
  x.op = "all_reduce";
  x.bytes = bytes;
  x.peer = 1;   // (CollectiveDesc's default)
  x.arrival_ps = arrival_ps;
  x.timeout_s = 10;
  x.device = 1;
  return std::async(std::launch::async, [&c, x] { return c.collective(x); });
}

std::vector<shim::ActivityRecord> collectives() {
  std::vector<shim::ActivityRecord> out;
  for (const auto& a : cardsim::testing::drain())
    if (a.kind == shim::ActivityRecord::Kind::Collective) out.push_back(a);
  return out;
}

}  // namespace

TEST(FabricAnswers, AnAnswerReadLaterEndsTheCollectiveWhereAnAnswerWaitedForDoes) {
  Job job;
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  const double bytes = 8 << 20;
  const uint64_t late = 3'000'000'000ull;   // rank 1 comes 3 ms into the run: it sets the start
  std::vector<uint64_t> ends;
  for (bool later : {false, true}) {
    auto other = rank1AllReduce(*job.rank1, bytes, late * (later ? 2 : 1));
    double seconds = 0;
    std::string algorithm;
    ASSERT_SHIM_OK(shim::launchFabricCollective(nullptr, allReduce(bytes, later), &seconds, &algorithm));
    if (later) {
      // Answered later: the call returned; settling it waits for rank 1's answer too.
      ASSERT_SHIM_OK(shim::fabricSettle());
    }
    const auto answer = other.get();
    ASSERT_SHIM_OK(shim::deviceSynchronize());
    const auto cs = collectives();
    ASSERT_EQ(cs.size(), 1u);
    EXPECT_EQ(cs[0].end_ps, answer.end_ps) << (later ? "answered later" : "waited for");
    EXPECT_GT(seconds, 0);
    ends.push_back(cs[0].end_ps - late * (later ? 2 : 1));
  }
  // The same collective from the same latest arrival: the same time either way.
  EXPECT_EQ(ends[0], ends[1]);
}

TEST(FabricAnswers, ASynchronizeBeforeTheSettleWaitsForTheAnswerRatherThanRunPastIt) {
  Job job;
  ASSERT_SHIM_OK(shim::setActivityRecording(true));
  const double bytes = 1 << 20;
  double seconds = 0;
  std::string algorithm;
  ASSERT_SHIM_OK(shim::launchFabricCollective(nullptr, allReduce(bytes, true), &seconds, &algorithm));
  // Rank 1 comes a wall-clock moment later, 5 ms into the simulated run.
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    (void)rank1AllReduce(*job.rank1, bytes, 5'000'000'000ull).get();
  });
  ASSERT_SHIM_OK(shim::deviceSynchronize());   // the run settles the answer first
  late.join();
  const auto cs = collectives();
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_GE(cs[0].end_ps, 5'000'000'000ull);
  uint64_t host = 0;
  ASSERT_SHIM_OK(shim::hostTimePs(&host));
  EXPECT_GE(host, cs[0].end_ps);   // the synchronize ended after it
  ASSERT_SHIM_OK(shim::fabricSettle());   // nothing left, nothing failed
}

TEST(FabricAnswers, AFailureAnsweredLaterIsTheLaunchingThreadsToReportAndTheRunGoesOn) {
  Job job;
  double seconds = 0;
  std::string algorithm;
  ASSERT_SHIM_OK(shim::launchFabricCollective(nullptr, allReduce(1 << 20, true), &seconds, &algorithm));
  auto other = rank1AllReduce(*job.rank1, 2 << 20, 0);   // disagrees on the size
  EXPECT_THROW(other.get(), sim::FabricError);
  // Another thread's settle (a run it needs) does not report this thread's failure ...
  std::thread([] { EXPECT_SHIM_OK(shim::fabricSettle()); }).join();
  // ... this thread's does, once, naming the disagreement.
  const shim::Status st = shim::fabricSettle();
  EXPECT_EQ(st.code(), shim::Code::CommFailed);
  EXPECT_NE(st.toString().find("disagree"), std::string::npos) << st.toString();
  EXPECT_SHIM_OK(shim::fabricSettle());
  EXPECT_SHIM_OK(shim::deviceSynchronize());   // the simulation is not stuck behind it
}
