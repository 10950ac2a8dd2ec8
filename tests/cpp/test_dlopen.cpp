// The simulator must load into a process with RTLD_NOW, as Python loads extensions.
#include <dlfcn.h>
#include <gtest/gtest.h>

TEST(Loading, SharedObjectWithTheSimulatorLoadsWithRtldNowAndRuns) {
  void* h = dlopen(CARDSIM_TEST_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  using Fn = int (*)();
  auto fn = reinterpret_cast<Fn>(dlsym(h, "cardsim_plugin_device_count"));
  ASSERT_NE(fn, nullptr) << dlerror();
  EXPECT_EQ(fn(), 3);
}
