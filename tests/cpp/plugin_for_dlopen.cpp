// A shared object built the way a Python extension is: the shim and the simulator linked
// in. test_dlopen loads it with RTLD_NOW, which fails if any symbol (sc_main) is missing.
#include <cardsim/shim.h>

extern "C" int cardsim_plugin_device_count() {
  cardsim::shim::InitOptions o;
  o.preset = "br100";
  o.devices = 3;
  if (!cardsim::shim::initialize(o).ok()) return -1;
  int n = -1;
  if (!cardsim::shim::getDeviceCount(&n).ok()) return -2;
  return n;
}
