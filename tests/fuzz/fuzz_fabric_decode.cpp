// Fuzz target: the fabric server's decoder (simulator/FabricDecode: frame lengths and
// ToServer messages) on an arbitrary byte stream, as a client's socket could deliver it.
// Garbage must come back as an error, never a crash; what decodes must re-encode to the
// same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "simulator/FabricDecode.h"
#include "simulator/FabricWire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const cardsim::sim::wire::Decoded d = cardsim::sim::wire::decodeStream(bytes);
  if (!d.error.empty() && d.incomplete_bytes != 0) std::abort();   // one or the other
  for (const auto& m : d.messages) {
    // A message that parsed serializes and parses back to an equal message.
    cardsim::fabric_rpc::ToServer again;
    if (!again.ParseFromString(m.SerializeAsString()) || again.SerializeAsString() != m.SerializeAsString())
      std::abort();
  }
  return 0;
}
