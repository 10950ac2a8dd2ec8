// Framing of the fabric server's protocol (simulator/proto/fabric.proto): a 4-byte
// big-endian length, then the message. Shared by FabricServer and FabricClient.
#pragma once

#include <cstdint>
#include <string>

namespace cardsim::sim::wire {

constexpr uint32_t kProtocolVersion = 9;   // 2: Park; 3: Arrive.eager (point to point); 4: Traffic; 5: Revise;
                                           // 6: Arrive.launched_ps; 7: Arrive.send_bytes, .recv_bytes, .device;
                                           // 8: AskGone / Gone; 9: Arrive.dtype, .reduce_op, .refused
// Far above any real message (an Arrive of a 100k-rank group is ~600 KB): a larger length
// is garbage on the socket, not a message.
constexpr uint32_t kMaxFrameBytes = 4u << 20;

inline std::string frame(const std::string& payload) {
  const uint32_t n = static_cast<uint32_t>(payload.size());
  std::string out(4, '\0');
  out[0] = static_cast<char>(n >> 24);
  out[1] = static_cast<char>(n >> 16);
  out[2] = static_cast<char>(n >> 8);
  out[3] = static_cast<char>(n);
  out += payload;
  return out;
}

inline uint32_t frameLength(const unsigned char* h) {
  return (uint32_t{h[0]} << 24) | (uint32_t{h[1]} << 16) | (uint32_t{h[2]} << 8) | uint32_t{h[3]};
}

}  // namespace cardsim::sim::wire
