// What each graph's capture took, from a rank's records in file order: the calls made on a
// capturing stream (or on a stream the capture forked to) between its capture's begin and
// end, kept per graph in capture order. The replay analysis (graph kernels' cost
// descriptors) and both exporters (Chakra: the captured call behind each graph command;
// Perfetto/Chakra: the captured event records and waits) read a launch's commands against
// these; one rule for which capture a call belongs to keeps the three in agreement.
#pragma once

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "traces/proto/trace.pb.h"

namespace cardsim::trace {

template <typename Item>
class CapturedByGraph {
 public:
  // A graph call that succeeded: a capture's begin opens it on its stream, its end hands
  // what it took to its graph (a graph captured again under its id: the latest capture).
  void graphOp(const GraphOp& g) {
    if (g.op() == GraphOp::CAPTURE_BEGIN) {
      open_[g.stream()].clear();
      opened_.erase(std::remove(opened_.begin(), opened_.end(), g.stream()), opened_.end());
      opened_.push_back(g.stream());
    } else if (g.op() == GraphOp::CAPTURE_END) {
      auto it = open_.find(g.stream());
      if (it == open_.end()) return;
      graphs_[g.graph()] = std::move(it->second);
      open_.erase(it);
      opened_.erase(std::remove(opened_.begin(), opened_.end(), g.stream()), opened_.end());
    }
  }

  bool capturing() const { return !opened_.empty(); }

  // A call on `stream` while a capture is open: the stream's own capture takes it, else (a
  // stream the capture forked to) the latest opened one. False if none is open.
  bool add(uint32_t stream, Item item) {
    if (opened_.empty()) return false;
    auto it = open_.find(stream);
    (it != open_.end() ? it->second : open_[opened_.back()]).push_back(std::move(item));
    return true;
  }

  // What graph `graph`'s capture took, in capture order; null if it was never captured.
  const std::vector<Item>* graph(uint32_t graph) const {
    auto it = graphs_.find(graph);
    return it == graphs_.end() ? nullptr : &it->second;
  }

 private:
  std::unordered_map<uint32_t, std::vector<Item>> open_;     // capturing stream -> taken so far
  std::vector<uint32_t> opened_;                              // capturing streams, oldest first
  std::unordered_map<uint32_t, std::vector<Item>> graphs_;   // graph -> taken, capture order
};

}  // namespace cardsim::trace
