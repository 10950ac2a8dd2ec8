// A rank's connection to the fabric server (FabricServer.h): reports collectives'
// arrivals and waits for their completions. Thread-safe: several host threads may have
// collectives in flight at once (each answer is matched to its request).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace cardsim::sim {

// Anything that went wrong with a collective on the fabric server, in words for the user.
class FabricError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class FabricClient {
 public:
  struct Identity {
    std::string job;
    uint32_t rank = 0;
    uint32_t world_size = 1;
    std::string preset;
    std::string fabric = {};   // fabric::fabricSignature of the rank's parameters ("": not checked)
  };
  // Connects to "host:port", or to "unix:PATH" / "unix:@NAME" (a Unix-domain socket, @ for an
  // abstract name: FabricServer::localAddress()), retrying refused connections until
  // `connect_timeout_s`, and
  // introduces the rank; throws FabricError naming the address and the reason.
  FabricClient(const std::string& address, const Identity& who, double connect_timeout_s = 30);
  ~FabricClient();
  FabricClient(const FabricClient&) = delete;
  FabricClient& operator=(const FabricClient&) = delete;

  struct Collective {
    std::string group;         // the process group's key
    std::vector<int> ranks;    // its global ranks, in group order
    uint64_t seq = 0;          // the collective's position in the group's sequence
    std::string op;
    double bytes = 0;
    uint32_t root = 0, peer = 0;
    std::string algorithm;
    uint64_t arrival_ps = 0;
    double timeout_s = 0;      // 0: wait as long as it takes
    // How far this rank's simulation may have run (events up to it may have happened): an
    // answered collective ending later can still be revised (protocol 5's Revise).
    uint64_t sealed_ps = 0;
    // When this rank's host is done issuing it: no member's end comes before the latest.
    uint64_t launched_ps = 0;
    // all_to_all with uneven splits: bytes this rank sends each member, in group order.
    std::vector<double> send_bytes;
    std::vector<double> recv_bytes;   // ... and what it expects from each member
    // The fabric device this rank runs it on; negative: its rank's (device r).
    int device = -1;
    // A reduction's element type and operation, checked against the other members'.
    std::string dtype, reduce_op;
    // Why this member cannot run it (empty: it runs): the server fails it on every member.
    std::string refused;
  };
  // An earlier answer's new end (the server's Revise).
  struct Revision {
    std::string group;
    uint64_t seq = 0;
    uint64_t end_ps = 0;
  };
  struct Completion {
    uint64_t end_ps = 0;
    std::string algorithm;
    double alone_s = 0;
    std::string note;   // the server's note on how it placed the members (empty: as asked)
    // Earlier answers of this rank moved later since its last call (they arrive before the
    // answer that brings them): the caller applies them before its simulation goes on.
    std::vector<Revision> revised;
  };
  // Reports the arrival and blocks until the server completes (or fails) the collective.
  Completion collective(const Collective& c);
  // collective() in two halves: arrive() reports the arrival and returns its ticket at once;
  // await() blocks until that ticket's answer (each ticket awaited once, with its `c`).
  uint64_t arrive(const Collective& c);
  Completion await(uint64_t ticket, const Collective& c);
  // Reports the sending side of a point-to-point transfer (op "send_recv", ranks [source,
  // destination]) and returns at once: a send does not wait for its receiver, whose
  // collective() call completes at the later arrival plus the transfer. An error about it
  // (the receiver left, the two disagree) is raised by this rank's next call.
  void post(const Collective& c);

  const std::string& address() const { return address_; }
  // The next sequence number of `group` (each group's collectives are numbered in call order).
  uint64_t nextSeq(const std::string& group);

  // Reports a peer copy between two cards of this process (their global ranks, source
  // first), starting at `start_ps`: collectives the server times after it share the links it
  // crosses with it. Returns at once; never answered.
  void traffic(int source, int destination, double bytes, uint64_t start_ps);
  uint32_t worldSize() const { return world_size_; }
  uint32_t rank() const { return rank_; }

  // Which of `ranks` (global) have left the job, each with how, as the server saw them go;
  // waits up to `timeout_s` for the answer. Throws FabricError if the server is gone.
  std::vector<std::pair<int, std::string>> goneOf(const std::vector<int>& ranks, double timeout_s);

  // Tells the server this rank waits (or no longer waits) on something outside it that only
  // another rank's progress ends; does not wait for an answer.
  void park(bool parked);

  // Closes the connection; collectives in flight fail.
  void close();

 private:
  struct Impl;
  void throwIfFailedLocked();
  std::string address_;
  uint32_t world_size_ = 1;
  uint32_t rank_ = 0;
  std::shared_ptr<Impl> impl_;
};

}  // namespace cardsim::sim
