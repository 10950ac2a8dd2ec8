#include "simulator/FabricDecode.h"

#include "simulator/FabricWire.h"

namespace cardsim::sim::wire {

std::string frameLengthError(uint32_t n) {
  if (n != 0 && n <= kMaxFrameBytes) return {};
  return "a frame of " + std::to_string(n) + " bytes (limit " + std::to_string(kMaxFrameBytes) +
         "): not a cardsim fabric client, or a corrupted stream";
}

std::string parseToServer(const std::string& body, rpc::ToServer* m) {
  if (m->ParseFromString(body) && m->msg_case() != rpc::ToServer::MSG_NOT_SET) return {};
  return "a malformed message (" + std::to_string(body.size()) +
         " bytes that are not a fabric protocol message): not a cardsim fabric client?";
}

Decoded decodeStream(const std::string& bytes) {
  Decoded d;
  std::size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 4) {
      d.incomplete_bytes = bytes.size() - at;
      break;
    }
    const uint32_t n = frameLength(reinterpret_cast<const unsigned char*>(bytes.data() + at));
    if (std::string why = frameLengthError(n); !why.empty()) {
      d.error = why;
      break;
    }
    if (bytes.size() - at - 4 < n) {
      d.incomplete_bytes = bytes.size() - at;
      break;
    }
    rpc::ToServer m;
    if (std::string why = parseToServer(bytes.substr(at + 4, n), &m); !why.empty()) {
      d.error = why;
      break;
    }
    d.messages.push_back(std::move(m));
    at += 4 + n;
  }
  return d;
}

}  // namespace cardsim::sim::wire
