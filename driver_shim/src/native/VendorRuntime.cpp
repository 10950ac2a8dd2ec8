// What every vendor binding (CNRT, SUPA runtime, CNCL, BCCL) shares.
#include <string>

#include "native/VendorRuntime.h"

namespace cardsim::shim::native {

Status vendorError(Code code, const char* call, const char* error_name, long error_code, const char* message) {
  std::string m = std::string(call) + " failed: " + error_name + " (" + std::to_string(error_code) + ")";
  if (message && *message) m += ": " + std::string(message);
  return Status(code, m);
}

}  // namespace cardsim::shim::native
