#include "device_models/Card.h"

#include <cmath>

#include "device_models/SimTime.h"
#include <string>

namespace cardsim::model {

const char* copyKindName(CopyKind k) {
  switch (k) {
    case CopyKind::HostToDevice: return "memcpy HtoD";
    case CopyKind::DeviceToHost: return "memcpy DtoH";
    case CopyKind::DeviceToDevice: return "memcpy DtoD";
    case CopyKind::PeerToPeer: return "memcpy peer";
    case CopyKind::Memset: return "memset";
  }
  return "?";
}

const char* commandKindName(CommandKind k) {
  switch (k) {
    case CommandKind::Kernel: return "kernel";
    case CommandKind::Copy: return "copy";
    case CommandKind::EventRecord: return "event record";
    case CommandKind::EventWait: return "event wait";
    case CommandKind::Collective: return "collective";
  }
  return "?";
}

Card::Card(sc_core::sc_module_name name, DeviceId id, const DeviceParams& params,
           ICompletionSink& sink, const std::vector<std::unique_ptr<Card>>& all_cards)
    : sc_module(name),
      id_(id),
      params_(params),
      sink_(sink),
      all_cards_(all_cards),
      memory_("memory", params.memory),
      link_("host_link", params.host_link),
      clusters_("clusters", params.compute, memory_),
      events_("event_unit", [this](DeviceId d, QueueId q) -> StreamQueue* {
        if (index(d) >= all_cards_.size() || !all_cards_[index(d)]) return nullptr;
        Card& c = *all_cards_[index(d)];
        return index(q) < c.queueCount() ? &c.queue(q) : nullptr;
      }) {
  for (uint32_t i = 0; i < params.dma.engines; ++i)
    dma_.push_back(std::make_unique<DmaEngine>(("dma_" + std::to_string(i)).c_str(), params.dma,
                                               link_, memory_));
  for (uint32_t i = 0; i < params.queues.hardware_queues; ++i)
    queues_.push_back(
        std::make_unique<StreamQueue>(("queue_" + std::to_string(i)).c_str(), *this, QueueId{i}));
}

DmaEngine& Card::acquireEngine() {
  for (;;) {
    for (auto& e : dma_) {
      if (!e->busy()) {
        e->setBusy(true);
        return *e;
      }
    }
    sc_core::wait(engine_freed_);
  }
}

void Card::releaseEngine(DmaEngine& e) {
  e.setBusy(false);
  engine_freed_.notify(sc_core::SC_ZERO_TIME);
}

void Card::execute(StreamQueue&, const Command& cmd, Waiter& waiter) {
  switch (cmd.kind) {
    case CommandKind::Kernel: {
      const double dispatch = cmd.in_graph ? params_.compute.graph_dispatch_latency_s
                                           : params_.compute.dispatch_latency_s;
      if (dispatch > 0)
        sc_core::wait(toScTime(dispatch));
      clusters_.execute(cmd.kernel, cmd.priority_rank, waiter);
      break;
    }
    case CommandKind::Copy: {
      PeerPath peer;
      if (cmd.copy_kind == CopyKind::PeerToPeer) {
        Card& other = *all_cards_.at(index(cmd.peer));
        peer = {&other.hostLink(), &other.memory(), cmd.peer_is_source, nullptr,
                cmd.peer_is_source ? cmd.peer : id_, cmd.peer_is_source ? id_ : cmd.peer};
        if (fabric_ && fabric_->joins(id_, cmd.peer)) peer.fabric = fabric_;
      }
      DmaEngine& engine = acquireEngine();
      engine.transfer(cmd.copy_kind, cmd.bytes, cmd.pageable, peer, waiter);
      releaseEngine(engine);
      break;
    }
    case CommandKind::EventRecord:
      if (cmd.event) events_.record(*cmd.event);
      break;
    case CommandKind::EventWait:
      events_.waitFor(cmd.wait_for);
      break;
    case CommandKind::Collective: {
      TimePs d = cmd.duration_ps;
      const TimePs now = sc_core::sc_time_stamp().value();
      if (cmd.end) {
        const TimePs end_at = cmd.end->end_ps.load();
        d = end_at > now ? end_at - now : 0;
      }
      else if (cmd.end_not_before_ps > now + d) d = cmd.end_not_before_ps - now;
      if (d == 0) break;
      // Its memory traffic, spread evenly over its time, contends with kernels and copies;
      // what memory cannot give it by its end is dropped rather than making it later.
      Waiter traffic;
      const bool loads = cmd.memory_bytes > 0;
      if (loads) {
        traffic.pending = 1;
        memory_.loadForCollective(cmd.memory_bytes, cmd.memory_bytes / (static_cast<double>(d) * 1e-12),
                                  params_.dma.memory_weight, &traffic);
      }
      // Its link traffic, likewise, holds back this process's peer copies on those links.
      std::vector<std::pair<std::string, double>> rates;
      if (fabric_ && !cmd.link_bytes.empty()) {
        const double seconds = static_cast<double>(d) * 1e-12;
        for (const auto& [link, bytes] : cmd.link_bytes) rates.emplace_back(link, bytes * cmd.link_share / seconds);
        fabric_->occupy(rates, +1);
      }
      sc_core::wait(sc_core::sc_time(static_cast<double>(d), sc_core::SC_PS));
      // Moved later meanwhile (a collective answered after it shares its links): it ends there.
      for (TimePs t; cmd.end && (t = cmd.end->end_ps.load()) > sc_core::sc_time_stamp().value();)
        sc_core::wait(sc_core::sc_time::from_value(t - sc_core::sc_time_stamp().value()));
      if (loads && traffic.pending > 0) memory_.cancel(&traffic);
      if (!rates.empty()) fabric_->occupy(rates, -1);
      break;
    }
  }
}

void Card::completed(StreamQueue& queue, const Command& cmd, TimePs start, TimePs end) {
  sink_.onComplete(id_, queue.id(), cmd, start, end);
}

}  // namespace cardsim::model
