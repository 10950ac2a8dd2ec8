#include "device_models/HostLink.h"

namespace cardsim::model {

HostLink::HostLink(sc_core::sc_module_name name, const HostLinkParams& params)
    : sc_module(name),
      params_(params),
      h2d_(params.bandwidth_bytes_per_s),
      d2h_(params.bandwidth_bytes_per_s) {
  SC_HAS_PROCESS(HostLink);
  SC_METHOD(onWakeH2D);
  sensitive << h2d_.wakeEvent();
  dont_initialize();
  SC_METHOD(onWakeD2H);
  sensitive << d2h_.wakeEvent();
  dont_initialize();
}

void HostLink::toDevice(double bytes, bool pageable, Waiter* w) {
  h2d_.start(effectiveBytes(bytes, pageable), 1.0, w);
}

void HostLink::toHost(double bytes, bool pageable, Waiter* w) {
  d2h_.start(effectiveBytes(bytes, pageable), 1.0, w);
}

}  // namespace cardsim::model
