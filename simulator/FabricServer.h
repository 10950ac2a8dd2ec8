// The fabric server: one shared collective-fabric model for the ranks of a job, one
// process per rank (Boost.Asio over TCP, and a Unix-domain socket for the ranks of its host;
// protocol in simulator/proto/fabric.proto).
//
// Each rank reports when a collective can start on its stream (its arrival, in simulated
// time); once every member of the group has arrived, the collective completes at the
// latest arrival plus the model's time for it, and every member gets that completion.
// Collectives ready together (answered when every rank of the job waits for an answer)
// and those still running when they start share the links: each is timed with the others
// on the fabric. The answer depends only on the arrivals, never on the wall-clock order
// in which they came, so reruns are bit-identical. Point-to-point transfers pair a send,
// which never waits (Arrive.eager), with its receive, answered as soon as both are in. A member that disconnects, or does not arrive within
// the group's timeout, fails the collective for the others with a message naming the
// group, the collective and the missing ranks. Garbage, an oversized frame or another
// protocol version costs that connection only; the server keeps serving the others.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "device_models/fabric/FabricParams.h"
#include "simulator/FabricModel.h"

namespace cardsim::sim {

class FabricServer {
 public:
  struct Options {
    std::string preset;               // the preset the model was built from (clients must match)
    std::string bind = "127.0.0.1";   // "0.0.0.0" for jobs spanning hosts
    uint16_t port = 0;                // 0: any free port
    bool log = false;                 // one line per connection event on stderr
    // Ready collectives are answered once every rank of the job waits for an answer (or has
    // left), or after this many wall seconds if one is busy elsewhere (see FabricServer.cpp).
    double settle_s = 3.0;
    // Also listen on a Unix-domain socket (an abstract name, localAddress()) for ranks on
    // this host: the same protocol, at a fraction of loopback TCP's cost per message.
    bool local = false;
  };
  // Binds and listens; throws std::runtime_error naming the address on failure.
  FabricServer(fabric::FabricParams params, Options options);
  ~FabricServer();
  FabricServer(const FabricServer&) = delete;
  FabricServer& operator=(const FabricServer&) = delete;

  uint16_t port() const;
  // "unix:@NAME" with Options::local (FabricClient connects to it as to "host:port"); "" without
  // it, or where the system offers no abstract Unix-domain names (TCP then serves alone).
  std::string localAddress() const;
  // Serves on a background thread.
  void start();
  // Serves on the calling thread until stop() (from another thread or a signal handler).
  void run();
  // Stops accepting, delivers answers already queued (up to `drain_s`), closes every
  // connection and returns once the serving thread has finished.
  void stop(double drain_s = 2.0);

  struct Stats {
    uint64_t collectives_completed = 0;
    uint64_t collectives_failed = 0;
    uint64_t connections_accepted = 0;
    uint64_t connections_open = 0;
    uint64_t collectives_pending = 0;
    uint64_t collectives_revised = 0;   // answers whose end a later settle moved (Revise)
  };
  Stats stats() const;
  // Bytes every completed collective put on each link, summed (cardsim replay's per-link
  // utilization).
  FabricModel::LinkLoads linkLoads() const;

  struct Impl;   // the serving state (public only so its connection objects can name it)

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace cardsim::sim
