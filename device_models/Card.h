// One simulated device (one chip): compute clusters, memory, host link, DMA engines,
// hardware queues and the event unit, wired together.
#pragma once

#include <memory>
#include <systemc>
#include <vector>

#include "device_models/ClusterArray.h"
#include "device_models/Command.h"
#include "device_models/DeviceParams.h"
#include "device_models/DmaEngine.h"
#include "device_models/EventUnit.h"
#include "device_models/FabricLinks.h"
#include "device_models/HostLink.h"
#include "device_models/MemorySystem.h"
#include "device_models/StreamQueue.h"

namespace cardsim::model {

class Card : public sc_core::sc_module {
 public:
  // `all_cards` lets peer copies and cross-device event waits reach the other cards; it
  // must outlive the card.
  Card(sc_core::sc_module_name name, DeviceId id, const DeviceParams& params,
       ICompletionSink& sink, const std::vector<std::unique_ptr<Card>>& all_cards);

  DeviceId id() const { return id_; }
  const DeviceParams& params() const { return params_; }
  StreamQueue& queue(QueueId q) { return *queues_.at(index(q)); }
  std::size_t queueCount() const { return queues_.size(); }
  ClusterArray& clusters() { return clusters_; }
  MemorySystem& memory() { return memory_; }
  HostLink& hostLink() { return link_; }
  EventUnit& events() { return events_; }
  const std::vector<std::unique_ptr<DmaEngine>>& dmaEngines() const { return dma_; }

  // Peer copies to devices `fabric` joins go over it (null: through the host links).
  void setFabric(FabricLinks* fabric) { fabric_ = fabric; }

  // Executes one command for `queue`, in that queue's thread.
  void execute(StreamQueue& queue, const Command& cmd, Waiter& waiter);
  void completed(StreamQueue& queue, const Command& cmd, TimePs start, TimePs end);

 private:
  DmaEngine& acquireEngine();
  void releaseEngine(DmaEngine& e);

  DeviceId id_;
  DeviceParams params_;
  ICompletionSink& sink_;
  const std::vector<std::unique_ptr<Card>>& all_cards_;
  MemorySystem memory_;
  HostLink link_;
  ClusterArray clusters_;
  EventUnit events_;
  std::vector<std::unique_ptr<DmaEngine>> dma_;
  std::vector<std::unique_ptr<StreamQueue>> queues_;
  sc_core::sc_event engine_freed_;
  FabricLinks* fabric_ = nullptr;
};

}  // namespace cardsim::model
