// The `native` backend: binds the shim to a real vendor runtime (CNRT or the SUPA
// runtime) loaded with dlopen. Only the discovery step exists so far: it finds the
// library where the vendor installs it and reports that the binding is not available.
#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "Backend.h"

namespace cardsim::shim {
namespace {

std::vector<std::string> candidates() {
  std::vector<std::string> paths;
  const char* neuware = std::getenv("NEUWARE_HOME");
  paths.push_back(std::string(neuware && *neuware ? neuware : "/usr/local/neuware") +
                  "/lib64/libcnrt.so");
  const char* biren = std::getenv("BIREN_HOME");
  paths.push_back(std::string(biren && *biren ? biren : "/usr/local/birensupa/sdk/latest") +
                  "/brumd/libsupa.so");
  paths.push_back("libcnrt.so");
  paths.push_back("libsupa.so");
  return paths;
}

}  // namespace

std::unique_ptr<IBackend> createNativeBackend(const InitOptions&, Status* why) {
  std::string tried;
  for (const std::string& path : candidates()) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      dlclose(handle);
      *why = Status(Code::NotSupported,
                    "native backend: found " + path +
                        ", but this build of cardsim has no binding for it yet; use "
                        "CARDSIM_BACKEND=sim");
      return nullptr;
    }
    tried += (tried.empty() ? "" : ", ") + path;
  }
  *why = Status(Code::InitFailed, "native backend: no vendor runtime found (tried " + tried +
                                      "); use CARDSIM_BACKEND=sim to simulate the cards");
  return nullptr;
}

}  // namespace cardsim::shim
