// A replay's report from its ranks' passes (traces/replay/RankAnalysis.h): a pass handed
// over in its binary form gives the same report as the rank's trace file read directly, and
// bytes that are cut short or not a pass are refused, naming where they came from.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "traces/lib/CapturedByGraph.h"
#include "traces/replay/RankAnalysis.h"
#include "traces/replay/ReplayReport.h"

namespace replay = cardsim::replay;

namespace {

const std::string kGolden = std::string(CARDSIM_TEST_DATA_DIR) + "/golden/traces/";

std::map<int, std::string> dpStep() {
  return {{0, kGolden + "dp_step/rank0.cstrace"}, {1, kGolden + "dp_step/rank1.cstrace"}};
}

void expectSameReport(const replay::Report& a, const replay::Report& b) {
  EXPECT_EQ(a.preset, b.preset);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.total_us, b.total_us);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (std::size_t i = 0; i < a.ranks.size(); ++i) {
    const auto &x = a.ranks[i].breakdown, &y = b.ranks[i].breakdown;
    EXPECT_EQ(a.ranks[i].calls, b.ranks[i].calls);
    EXPECT_EQ(a.ranks[i].device_commands, b.ranks[i].device_commands);
    EXPECT_EQ(x.total_us, y.total_us);
    EXPECT_EQ(x.compute_us, y.compute_us);
    EXPECT_EQ(x.memory_bound_us, y.memory_bound_us);
    EXPECT_EQ(x.copies_us, y.copies_us);
    EXPECT_EQ(x.communication_us, y.communication_us);
    EXPECT_EQ(x.exposed_communication_us, y.exposed_communication_us);
    EXPECT_EQ(x.idle_us, y.idle_us);
    ASSERT_EQ(a.ranks[i].utilization.size(), b.ranks[i].utilization.size());
    for (std::size_t u = 0; u < a.ranks[i].utilization.size(); ++u) {
      EXPECT_EQ(a.ranks[i].utilization[u].clusters, b.ranks[i].utilization[u].clusters);
      EXPECT_EQ(a.ranks[i].utilization[u].memory_bandwidth, b.ranks[i].utilization[u].memory_bandwidth);
      EXPECT_EQ(a.ranks[i].utilization[u].fabric, b.ranks[i].utilization[u].fabric);
    }
  }
  ASSERT_EQ(a.top_kernels.size(), b.top_kernels.size());
  for (std::size_t i = 0; i < a.top_kernels.size(); ++i) {
    EXPECT_EQ(a.top_kernels[i].name, b.top_kernels[i].name);
    EXPECT_EQ(a.top_kernels[i].count, b.top_kernels[i].count);
    EXPECT_EQ(a.top_kernels[i].time_us, b.top_kernels[i].time_us);
  }
  EXPECT_EQ(a.critical_path.total_us, b.critical_path.total_us);
  EXPECT_EQ(a.critical_path.by_kind, b.critical_path.by_kind);
  ASSERT_EQ(a.critical_path.items.size(), b.critical_path.items.size());
  for (std::size_t i = 0; i < a.critical_path.items.size(); ++i) {
    EXPECT_EQ(a.critical_path.items[i].name, b.critical_path.items[i].name);
    EXPECT_EQ(a.critical_path.items[i].time_us, b.critical_path.items[i].time_us);
  }
}

}  // namespace

TEST(ReplayAnalysis, PassesHandedOverInBinaryGiveTheReportOfTheFiles) {
  const replay::Report direct = replay::analyze(dpStep());
  ASSERT_EQ(direct.ranks.size(), 2u);
  ASSERT_GT(direct.total_us, 0);
  ASSERT_GT(direct.critical_path.total_us, 0);
  ASSERT_FALSE(direct.top_kernels.empty());
  ASSERT_GT(direct.ranks[0].breakdown.communication_us, 0);   // the step's all-reduce
  std::vector<replay::RankPass> passes;
  for (const auto& [rank, file] : dpStep()) {
    const replay::RankPass read = replay::readRank(rank, file);
    EXPECT_FALSE(read.collectives.empty());
    passes.push_back(replay::readPass(replay::writePass(read), file + ".pass"));
    EXPECT_EQ(passes.back().collectives.size(), read.collectives.size());
    EXPECT_EQ(passes.back().rd.cmds.size(), read.rd.cmds.size());
  }
  expectSameReport(replay::merge(std::move(passes)), direct);
}

TEST(ReplayAnalysis, OnlyTheCallsOfCommandsAreKept) {
  const replay::RankPass pass = replay::readRank(0, kGolden + "dp_step/rank0.cstrace");
  ASSERT_GT(pass.rr.calls, pass.rd.calls.items().size());   // some calls submit nothing
  for (const replay::Cmd& c : pass.rd.cmds)
    if (c.call != 0) {
      EXPECT_NE(pass.rd.calls.find(c.call), nullptr) << "call " << c.call;
    }
}

TEST(ReplayAnalysis, CutShortOrForeignBytesAreRefusedNamingTheirSource) {
  const std::string bytes = replay::writePass(replay::readRank(0, kGolden + "dp_step/rank0.cstrace"));
  ASSERT_GT(bytes.size(), 1000u);
  // Every cut: a few around each end, and a spread in between.
  std::vector<std::size_t> cuts;
  for (std::size_t n = 0; n < 64; ++n) cuts.push_back(n);
  for (std::size_t n = 64; n < bytes.size(); n += bytes.size() / 97 + 1) cuts.push_back(n);
  for (std::size_t n = bytes.size() - 16; n < bytes.size(); ++n) cuts.push_back(n);
  for (std::size_t n : cuts) {
    try {
      (void)replay::readPass(bytes.substr(0, n), "rank0.pass");
      ADD_FAILURE() << "a pass cut at byte " << n << " of " << bytes.size() << " was read";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("rank0.pass"), std::string::npos) << e.what();
    }
  }
  try {
    (void)replay::readPass(bytes + "x", "rank0.pass");
    ADD_FAILURE() << "a pass with a byte too many was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("too many"), std::string::npos) << e.what();
  }
  try {
    (void)replay::readPass(std::string(200, '\x07'), "other.bin");
    ADD_FAILURE() << "foreign bytes were read as a pass";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("other.bin: not a rank's replay summary"), std::string::npos) << e.what();
  }
}

TEST(ReplayAnalysis, CallTableKeepsTheLastValueOfANumberInAnyOrder) {
  replay::CallTable<int> t;
  t.add(1, 10);
  t.add(2, 20);
  EXPECT_EQ(*t.find(2), 20);
  t.add(5, 50);
  t.add(3, 30);   // out of order
  t.add(2, 21);   // again: replaces
  EXPECT_EQ(*t.find(3), 30);
  EXPECT_EQ(*t.find(2), 21);
  EXPECT_EQ(*t.find(5), 50);
  EXPECT_EQ(t.find(4), nullptr);
  EXPECT_EQ(t.items().size(), 4u);
  const replay::CallTable<int>& settled = t;
  EXPECT_EQ(*settled.find(1), 10);
}

namespace {
cardsim::trace::GraphOp graphOp(cardsim::trace::GraphOp::Op op, uint32_t stream, uint32_t graph = 0) {
  cardsim::trace::GraphOp g;
  g.set_op(op);
  g.set_stream(stream);
  g.set_graph(graph);
  return g;
}
}  // namespace

TEST(CapturedByGraph, ACallGoesToItsStreamsCaptureElseToTheLatestOpened) {
  using cardsim::trace::GraphOp;
  cardsim::trace::CapturedByGraph<int> c;
  EXPECT_FALSE(c.add(7, 0));   // nothing open: taken by no graph
  c.graphOp(graphOp(GraphOp::CAPTURE_BEGIN, 9));
  c.graphOp(graphOp(GraphOp::CAPTURE_BEGIN, 3));   // opened later, on a lower stream id
  EXPECT_TRUE(c.add(9, 1));    // its own stream's capture
  EXPECT_TRUE(c.add(3, 2));
  EXPECT_TRUE(c.add(5, 3));    // a stream a capture forked to: the latest opened (stream 3's)
  c.graphOp(graphOp(GraphOp::CAPTURE_END, 3, 30));
  EXPECT_TRUE(c.add(6, 4));    // now stream 9's is the only one open
  c.graphOp(graphOp(GraphOp::CAPTURE_END, 9, 90));
  EXPECT_FALSE(c.capturing());
  ASSERT_NE(c.graph(30), nullptr);
  ASSERT_NE(c.graph(90), nullptr);
  EXPECT_EQ(*c.graph(30), (std::vector<int>{2, 3}));
  EXPECT_EQ(*c.graph(90), (std::vector<int>{1, 4}));
  EXPECT_EQ(c.graph(31), nullptr);
  // Captured again under its id: the latest capture is the graph's.
  c.graphOp(graphOp(GraphOp::CAPTURE_BEGIN, 3));
  c.add(3, 5);
  c.graphOp(graphOp(GraphOp::CAPTURE_END, 3, 30));
  EXPECT_EQ(*c.graph(30), (std::vector<int>{5}));
}
