// One DMA engine: moves bytes host<->device, within the device, between devices (over the
// fabric where one joins them, else through both host links), or fills memory. A transfer
// holds the engine for its duration and loads every pipe it crosses (host link direction, memory of each device touched); it ends when the slowest
// of them is done, after the path's fixed latency. In each memory it weighs
// dma.memory_weight against the cluster array's 1 (MemorySystem's sharing rule).
#pragma once

#include <systemc>

#include "device_models/Command.h"
#include "device_models/HostLink.h"
#include "device_models/MemorySystem.h"

namespace cardsim::model {

class FabricLinks;

// The far end of a peer-to-peer copy, and which way the bytes go. With `fabric` (the two
// devices are joined by the fabric), the bytes cross the fabric's route from `from` to `to`
// instead of both cards' host links.
struct PeerPath {
  HostLink* link = nullptr;
  MemorySystem* memory = nullptr;
  bool peer_is_source = false;
  FabricLinks* fabric = nullptr;
  DeviceId from{}, to{};
};

class DmaEngine : public sc_core::sc_module {
 public:
  DmaEngine(sc_core::sc_module_name name, const DmaParams& params, HostLink& link,
            MemorySystem& memory);

  // Blocks the calling thread for the transfer's simulated duration.
  void transfer(CopyKind kind, uint64_t bytes, bool pageable, const PeerPath& peer,
                Waiter& waiter);

  bool busy() const { return busy_; }
  void setBusy(bool b) { busy_ = b; }
  uint64_t bytesMoved() const { return bytes_moved_; }

 private:
  DmaParams params_;
  HostLink& link_;
  MemorySystem& memory_;
  bool busy_ = false;
  uint64_t bytes_moved_ = 0;
};

}  // namespace cardsim::model
