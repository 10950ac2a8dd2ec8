// The collective algorithms (one per file) and the registry that names and picks them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "device_models/fabric/Collective.h"

namespace cardsim::fabric {

std::unique_ptr<ICollectiveAlgorithm> makeRing();
std::unique_ptr<ICollectiveAlgorithm> makeTree();
std::unique_ptr<ICollectiveAlgorithm> makeDirect();
std::unique_ptr<ICollectiveAlgorithm> makeHierarchical();
std::unique_ptr<ICollectiveAlgorithm> makeSwitch();

// Ring strides coprime with n, one per channel (1, then the next coprime ones).
std::vector<uint32_t> ringStrides(uint32_t n, uint32_t channels);

// The registry: algorithms by name ("ring", "tree", "direct", "hierarchical", "switch").
const ICollectiveAlgorithm& algorithm(const std::string& name);   // throws listing the names
std::vector<std::string> algorithmNames();

// The documented choice when none is forced:
// - send/recv: direct;
// - ranks spread over more than one node: hierarchical (all_reduce), else ring;
// - all_to_all: direct;
// - all_reduce: switch when every rank hangs off one reducing switch and the message is at
//   least `switch_min_bytes`; tree below `tree_max_bytes`; ring otherwise;
// - all_gather / reduce_scatter: direct when every pair of ranks has its own link (a full
//   mesh), ring otherwise;
// - broadcast / reduce / barrier: tree below `tree_max_bytes`, ring otherwise.
struct SelectionRule {
  double tree_max_bytes = 256 * 1024;
  double switch_min_bytes = 64 * 1024;
};
const ICollectiveAlgorithm& chooseAlgorithm(const CollectiveRequest& r, const Topology& t,
                                            const SelectionRule& rule = {});
// `forced` empty: chooseAlgorithm; otherwise that algorithm, or an error naming why it
// cannot run this collective.
const ICollectiveAlgorithm& pickAlgorithm(const std::string& forced, const CollectiveRequest& r,
                                          const Topology& t, const SelectionRule& rule = {});

// True when every pair of the ranks' devices is joined by one direct link.
bool fullyConnected(const std::vector<NodeId>& ranks, const Topology& t);

}  // namespace cardsim::fabric
