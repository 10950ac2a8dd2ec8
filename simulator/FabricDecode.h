// Decoding what a client sends the fabric server: length-prefixed frames (FabricWire.h)
// holding ToServer messages. The server's sessions decode with these, one frame at a time
// as bytes arrive; decodeStream does a whole byte stream at once (tests, the fuzz target).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "simulator/proto/fabric.pb.h"

namespace cardsim::sim::wire {

namespace rpc = cardsim::fabric_rpc;

// Empty if `n` is a plausible frame length; otherwise why not, in words for the client.
std::string frameLengthError(uint32_t n);
// Parses one frame's body into `m`; empty on success, otherwise why it is not a message.
std::string parseToServer(const std::string& body, rpc::ToServer* m);

struct Decoded {
  std::vector<rpc::ToServer> messages;   // every whole message before the first error
  std::string error;                     // empty if the stream held only whole messages
  std::size_t incomplete_bytes = 0;      // a trailing partial frame (more bytes to come)
};
Decoded decodeStream(const std::string& bytes);

}  // namespace cardsim::sim::wire
