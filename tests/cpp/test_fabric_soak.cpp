// A short soak of the fabric server (the long one is benchmarks/fabric_soak.cpp): every
// completion arrives exactly once and agrees across its group, misbehaving clients cost
// only their own collectives, and the server's memory does not grow with the collectives
// it has served.
#include <gtest/gtest.h>

#include "simulator/FabricConfig.h"
#include "tests/cpp/FabricSoak.h"

using namespace cardsim;

TEST(FabricSoak, ManyGroupsNoLostOrDuplicatedCompletionsWhileOthersMisbehave) {
  sim::SimOptions so;
  so.preset = "mlu370-x8";
  sim::FabricServer server(sim::loadFabricParams(so), sim::FabricServer::Options{"mlu370-x8", "127.0.0.1", 0, false});
  server.start();
  soak::Options o;
  o.clients = 128;
  o.group_size = 8;
  o.collectives = 3200;   // 200 per group
  const soak::Result r = soak::run(server, o);
  EXPECT_EQ(r.errors, 0u);
  EXPECT_EQ(r.completed, r.expected);
  EXPECT_EQ(r.disagreements, 0u);
  EXPECT_EQ(r.fault_errors, 3u);   // the leaver's peer, the staller's peer, the garbage socket
  EXPECT_EQ(r.server_completed, r.expected);
  EXPECT_EQ(r.server_failed, 2u);
  EXPECT_EQ(r.server_pending, 0u);
  // Memory between a quarter of the run and its end: flat (the server keeps no history of
  // completed collectives); 16 MiB of slack for allocator noise.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)   // their allocators: RSS says nothing
  EXPECT_LT(r.rss_end_kb - r.rss_quarter_kb, 16 * 1024) << r.rss_quarter_kb << " -> " << r.rss_end_kb;
#endif
  server.stop();
}
