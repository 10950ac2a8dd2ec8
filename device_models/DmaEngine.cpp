#include "device_models/DmaEngine.h"

#include <cmath>

#include "device_models/FabricLinks.h"
#include "device_models/SimTime.h"

namespace cardsim::model {

DmaEngine::DmaEngine(sc_core::sc_module_name name, const DmaParams& params, HostLink& link,
                     MemorySystem& memory)
    : sc_module(name), params_(params), link_(link), memory_(memory) {}

void DmaEngine::transfer(CopyKind kind, uint64_t bytes, bool pageable, const PeerPath& peer,
                         Waiter& waiter) {
  const double b = static_cast<double>(bytes);
  double latency = 0;
  switch (kind) {
    case CopyKind::HostToDevice:
    case CopyKind::DeviceToHost:
      latency = link_.params().latency_s;
      break;
    case CopyKind::PeerToPeer:
      latency = peer.fabric ? peer.fabric->latencySeconds(peer.from, peer.to) : link_.params().latency_s;
      break;
    case CopyKind::DeviceToDevice:
    case CopyKind::Memset:
      latency = params_.d2d_latency_s;
      break;
  }
  if (latency > 0) sc_core::wait(toScTime(latency));
  bytes_moved_ += bytes;
  if (bytes == 0) return;
  const double w = params_.memory_weight;
  switch (kind) {
    case CopyKind::HostToDevice:
      waiter.pending = 2;
      link_.toDevice(b, pageable, &waiter);
      memory_.transferForDma(b, w, &waiter);
      break;
    case CopyKind::DeviceToHost:
      waiter.pending = 2;
      link_.toHost(b, pageable, &waiter);
      memory_.transferForDma(b, w, &waiter);
      break;
    case CopyKind::DeviceToDevice:
      waiter.pending = 1;
      memory_.transferForDma(2 * b, w, &waiter);  // read and write through the same memory
      break;
    case CopyKind::Memset:
      waiter.pending = 1;
      memory_.transferForDma(b, w, &waiter);
      break;
    case CopyKind::PeerToPeer:
      if (peer.fabric) {
        waiter.pending = 3;
        memory_.transferForDma(b, w, &waiter);
        peer.memory->transferForDma(b, w, &waiter);
        peer.fabric->transfer(peer.from, peer.to, b, &waiter);
        break;
      }
      waiter.pending = 4;
      memory_.transferForDma(b, w, &waiter);
      peer.memory->transferForDma(b, w, &waiter);
      if (peer.peer_is_source) {
        peer.link->toHost(b, false, &waiter);
        link_.toDevice(b, false, &waiter);
      } else {
        link_.toHost(b, false, &waiter);
        peer.link->toDevice(b, false, &waiter);
      }
      break;
  }
  sc_core::wait(waiter.done);
}

}  // namespace cardsim::model
