// Reading a Chakra node's attributes (ChakraImport): by name, whichever field a writer put
// a number in, and cardsim's own lists of byte counts.
#pragma once

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "traces/export/proto/chakra_et.pb.h"

namespace cardsim::replay::chakra_attr {

namespace chakra = ChakraProtoMsg;

inline const chakra::AttributeProto* attr(const chakra::Node& n, const std::string& name) {
  for (const auto& a : n.attr())
    if (a.name() == name) return &a;
  return nullptr;
}

// An attribute's number whichever numeric field holds it (writers differ in the types).
inline bool number(const chakra::Node& n, const std::string& name, double* out) {
  const chakra::AttributeProto* a = attr(n, name);
  if (!a) return false;
  switch (a->value_case()) {
    case chakra::AttributeProto::kDoubleVal: *out = a->double_val(); return true;
    case chakra::AttributeProto::kInt32Val: *out = a->int32_val(); return true;
    case chakra::AttributeProto::kInt64Val: *out = static_cast<double>(a->int64_val()); return true;
    case chakra::AttributeProto::kUint64Val: *out = static_cast<double>(a->uint64_val()); return true;
    case chakra::AttributeProto::kBoolVal: *out = a->bool_val(); return true;
    default: return false;
  }
}
inline double numberOr(const chakra::Node& n, const std::string& name, double fallback) {
  double v = 0;
  return number(n, name, &v) ? v : fallback;
}

// What cardsim's export says the rank waited at a collective for slower ranks (0: nothing).
inline uint64_t peersLatePs(const chakra::Node& n) {
  const chakra::AttributeProto* a = attr(n, "cardsim_peers_late_ps");
  return a && a->value_case() == chakra::AttributeProto::kUint64Val ? a->uint64_val() : 0;
}

// A node's duration in picoseconds: cardsim's exact one when it wrote the node, else
// duration_micros.
inline double durationPs(const chakra::Node& n) {
  double ps = 0;
  return number(n, "cardsim_duration_ps", &ps) ? ps : static_cast<double>(n.duration_micros()) * 1e6;
}

inline std::string text(const chakra::Node& n, const std::string& name) {
  const chakra::AttributeProto* a = attr(n, name);
  return a && a->value_case() == chakra::AttributeProto::kStringVal ? a->string_val() : std::string();
}
// Byte counts written "a,b,c" (ChakraWriter's byteList); *bad: a part is no count of bytes.
inline std::vector<double> byteList(const chakra::Node& n, const std::string& name, bool* bad) {
  std::vector<double> out;
  std::istringstream in(text(n, name));
  for (std::string part; std::getline(in, part, ',');) {
    char* end = nullptr;
    const double v = std::strtod(part.c_str(), &end);
    *bad = *bad || part.empty() || *end != '\0' || !(v >= 0 && v < 1e18);
    out.push_back(v);
  }
  return out;
}

// A send's or receive's two ends, a side that leaves out its own rank taking the file's
// (ASTRA-sim's custom collectives: a send names only comm_dst, a receive only comm_src).
// False unless they are two different ranks.
inline bool pointToPointEnds(const chakra::Node& n, int rank, int* src, int* dst) {
  const bool send = n.type() == chakra::COMM_SEND_NODE;
  const double s = numberOr(n, "comm_src", send ? rank : -1), d = numberOr(n, "comm_dst", send ? -1 : rank);
  const bool valid = s >= 0 && s < (1 << 24) && d >= 0 && d < (1 << 24);
  *src = valid ? static_cast<int>(s) : -1;
  *dst = valid ? static_cast<int>(d) : -1;
  return *src >= 0 && *dst >= 0 && *src != *dst;
}

}  // namespace cardsim::replay::chakra_attr
