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
// The rank orders (indices into `members`, devices of one node) of `channels` rings: member
// 0, s, 2s, ... over the coprime strides; asked for more channels than there are such
// strides, a full mesh (each hop a link of its own) takes link-disjoint rings instead, as many
// as asked up to n - 2 (even n) or n - 1 (odd n), so that every channel runs over other links.
std::vector<std::vector<uint32_t>> ringOrders(const std::vector<NodeId>& members, uint32_t channels,
                                              const Topology& t);

// The registry: algorithms by name ("ring", "tree", "direct", "hierarchical", "switch").
const ICollectiveAlgorithm& algorithm(const std::string& name);   // throws listing the names
std::vector<std::string> algorithmNames();

// The choice when none is forced, as a vendor library's tuner makes it: of the algorithms
// that can run the collective on these ranks, the one the model times fastest alone on an
// idle fabric (ties go to the registry's order: ring, tree, direct, hierarchical, switch).
// So small messages go to the latency-light algorithms (tree, direct), large ones to those
// that keep every link busy (ring with channels, direct on a full mesh, in-switch
// reduction), and jobs across nodes to the ring over every NIC at large sizes, hierarchical
// or tree at mid sizes, whichever is faster. All-pairs schedules
// (direct) are weighed only for ranks within one node (all_to_all excepted: only direct
// does it), as vendor libraries use them. Only the library's algorithms are weighed
// (r.library, fabric.library_algorithms: NCCL has no all-pairs all_reduce, and builds its
// trees between nodes only), unless none of them does the collective.
const ICollectiveAlgorithm& chooseAlgorithm(const CollectiveRequest& r, const Topology& t);
// `forced` empty: chooseAlgorithm; otherwise that algorithm, or an error naming why it
// cannot run this collective.
const ICollectiveAlgorithm& pickAlgorithm(const std::string& forced, const CollectiveRequest& r,
                                          const Topology& t);

// A preferred algorithm (CARDSIM_COLL_ALGO, fabric.algorithm): that one for the collectives
// it can run, the tuner's choice for the others (as NCCL_ALGO leaves an operation its
// algorithms do not cover to the rest). An unknown name throws, listing the valid ones.
const ICollectiveAlgorithm& preferAlgorithm(const std::string& preferred, const CollectiveRequest& r,
                                            const Topology& t);
// The rule of preferAlgorithm without the tuner: the preferred algorithm, or null where the
// choice is left to the tuner (none preferred, or it cannot run this collective).
const ICollectiveAlgorithm* preferredIfRunnable(const std::string& preferred, const CollectiveRequest& r,
                                                const Topology& t);

// True when every rank's device is in one node (host) of the topology.
bool withinOneNode(const std::vector<NodeId>& ranks, const Topology& t);

// True when every pair of the ranks' devices is joined by one direct link.
bool fullyConnected(const std::vector<NodeId>& ranks, const Topology& t);

}  // namespace cardsim::fabric
