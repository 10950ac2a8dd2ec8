// The `sim` backend: collectives timed by the fabric model.
#include "SimBackend.h"

namespace cardsim::shim::simbackend {

Status SimBackend::launchFabricCollective(Stream stream, const CollectiveDesc& desc, double* seconds,
                                          std::string* algorithm) {
  StreamObject* s = nullptr;
  if (Status st = resolve(stream, "launchFabricCollective", &s); !st.ok()) return st;
  if (!fabric_)
    return Status(Code::NotSupported, "launchFabricCollective '" + desc.op + "': " + fabric_error_);
  sim::FabricModel::Timed t;
  try {
    t = fabric_->time(fabric::parseOp(desc.op), desc.bytes, desc.ranks, static_cast<uint32_t>(std::max(desc.root, 0)),
                      static_cast<uint32_t>(std::max(desc.peer, 0)), desc.algorithm);
  } catch (const std::exception& e) {
    return Status(Code::InvalidValue, "launchFabricCollective '" + desc.op + "': " + e.what());
  }
  if (seconds) *seconds = t.seconds;
  if (algorithm) *algorithm = t.algorithm;
  model::Command cmd;
  cmd.kind = CommandKind::Collective;
  cmd.duration_ps = model::secondsToPs(t.seconds);
  const std::string name = desc.op + ":" + t.algorithm;
  if (capturing(s)) return record(s, name, nullptr, std::move(cmd));
  return submitAndMaybeWait(s, std::move(cmd), name, params_.host.launch_overhead_s, false);
}

}  // namespace cardsim::shim::simbackend
