// The PCIe link between host and card: full duplex, so host-to-device and
// device-to-host traffic each have the link's one-direction bandwidth.
#pragma once

#include <systemc>

#include "device_models/DeviceParams.h"
#include "device_models/SharedPipe.h"

namespace cardsim::model {

class HostLink : public sc_core::sc_module {
 public:
  HostLink(sc_core::sc_module_name name, const HostLinkParams& params);

  // `pageable`: the host buffer is not pinned, so the transfer is staged and slower.
  void toDevice(double bytes, bool pageable, Waiter* w);
  void toHost(double bytes, bool pageable, Waiter* w);
  const HostLinkParams& params() const { return params_; }
  const FairShare& statsToDevice() const { return h2d_.share(); }
  const FairShare& statsToHost() const { return d2h_.share(); }

 private:
  double effectiveBytes(double bytes, bool pageable) const {
    return pageable ? bytes / params_.pageable_efficiency : bytes;
  }
  void onWakeH2D() { h2d_.onWake(); }
  void onWakeD2H() { d2h_.onWake(); }
  HostLinkParams params_;
  SharedPipe h2d_;
  SharedPipe d2h_;
};

}  // namespace cardsim::model
