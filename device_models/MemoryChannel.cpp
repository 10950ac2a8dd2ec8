#include "device_models/MemoryChannel.h"

namespace cardsim::model {

MemoryChannel::MemoryChannel(sc_core::sc_module_name name, const MemoryParams& params)
    : sc_module(name), params_(params), pipe_(params.bandwidth_bytes_per_s) {
  SC_HAS_PROCESS(MemoryChannel);
  SC_METHOD(onWake);
  sensitive << pipe_.wakeEvent();
  dont_initialize();
}

}  // namespace cardsim::model
