#include "traces/replay/ChakraFiles.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <iterator>

#include "simulator/FabricModel.h"
#include "traces/lib/TraceError.h"
#include "traces/proto/trace.pb.h"
#include "traces/replay/ChakraAttributes.h"

namespace cardsim::replay {

namespace chakra = ChakraProtoMsg;
using trace::TraceError;

EtFile readEt(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TraceError(path + ": cannot open the Chakra trace");
  const std::string buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EtFile f;
  std::size_t pos = 0, index = 0;
  while (pos < buf.size()) {
    uint64_t len = 0;
    std::size_t i = 0;
    for (int shift = 0;; shift += 7, ++i) {
      if (pos + i >= buf.size() || i >= 10)
        throw TraceError(path + ": message #" + std::to_string(index) + " at offset " + std::to_string(pos) +
                         ": truncated or corrupt length prefix");
      const auto b = static_cast<uint8_t>(buf[pos + i]);
      len |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) break;
    }
    const std::size_t body = pos + i + 1;
    if (len > buf.size() - body)
      throw TraceError(path + ": message #" + std::to_string(index) + " at offset " + std::to_string(pos) +
                       ": truncated: it needs " + std::to_string(len) + " bytes, " +
                       std::to_string(buf.size() - body) + " left in the file");
    bool ok = index == 0 ? f.meta.ParseFromArray(buf.data() + body, static_cast<int>(len))
                         : f.nodes.emplace_back().ParseFromArray(buf.data() + body, static_cast<int>(len));
    // Files of Chakra's layout before 0.0.4 (ASTRA-sim's data-parallel examples of 2023)
    // start with their first node: no GlobalMetadata.
    if (!ok && index == 0) {
      f.meta.Clear();
      chakra::Node& first = f.nodes.emplace_back();
      ok = first.ParseFromArray(buf.data() + body, static_cast<int>(len)) &&
           (first.id() > 0 || !first.name().empty() || first.type() != chakra::INVALID_NODE);
      if (!ok) f.nodes.pop_back();
    }
    if (!ok)
      throw TraceError(path + ": message #" + std::to_string(index) + " at offset " + std::to_string(pos) +
                       ": does not parse as a Chakra " + (index == 0 ? "GlobalMetadata (or Node)" : "Node"));
    pos = body + len;
    ++index;
  }
  if (index == 0) throw TraceError(path + ": not a Chakra trace (the file is empty)");
  return f;
}

// A small reader for the one shape ASTRA-sim's groups file has.
std::map<std::string, std::vector<int>> readGroups(const std::string& path) {
  std::map<std::string, std::vector<int>> out;
  std::ifstream in(path);
  if (!in) return out;
  const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t i = 0;
  auto fail = [&](const std::string& what) {
    throw TraceError(path + ": offset " + std::to_string(i) + ": " + what +
                     " (expected {\"<pg_name>\": [rank, ...], ...})");
  };
  auto skip = [&] {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  };
  auto expect = [&](char c) {
    skip();
    if (i >= s.size() || s[i] != c) fail(std::string("expected '") + c + "'");
    ++i;
  };
  // After an item: true past a comma (another follows), false past `close` (the list ended).
  auto another = [&](char close) {
    skip();
    if (i < s.size() && s[i] == ',') {
      ++i;
      return true;
    }
    expect(close);
    return false;
  };
  expect('{');
  skip();
  if (i < s.size() && s[i] == '}') return out;
  for (;;) {
    expect('"');
    const std::size_t end = s.find('"', i);
    if (end == std::string::npos) fail("unterminated group name");
    const std::string key = s.substr(i, end - i);
    i = end + 1;
    expect(':');
    expect('[');
    std::vector<int>& ranks = out[key];
    skip();
    if (i < s.size() && s[i] == ']') {
      ++i;
    } else {
      for (;;) {
        skip();
        std::size_t used = 0;
        try {
          ranks.push_back(std::stoi(s.substr(i), &used));
        } catch (const std::exception&) {
          fail("expected a rank");
        }
        if (ranks.back() < 0) fail("a negative rank");
        i += used;
        if (!another(']')) break;
      }
    }
    if (!another('}')) break;
  }
  return out;
}

std::vector<int> groupMembers(const std::map<std::string, std::vector<int>>& groups, const std::string& pg,
                              int rank, int world, const std::string& where, const std::string& groups_source) {
  std::vector<int> ranks;
  if (pg.empty()) {
    for (int r = 0; r < world; ++r) ranks.push_back(r);
    return ranks;
  }
  auto g = groups.find(pg);
  if (g == groups.end())
    throw trace::TraceError(where + ": process group '" + pg + "' is not in the groups file (" + groups_source +
                            " needs its PREFIX.comm_groups.json)");
  ranks = g->second;
  for (int r : ranks)
    if (r < 0 || r >= world)
      throw trace::TraceError(where + ": process group '" + pg + "' of the groups file names rank " +
                              std::to_string(r) + ", outside the job's " + std::to_string(world) + " ranks");
  if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end())
    throw trace::TraceError(where + ": rank " + std::to_string(rank) + " runs a collective of process group '" + pg +
                            "', which the groups file does not make it a member of");
  return ranks;
}

void checkNodeNumbers(const chakra::Node& n, const std::string& where, bool communicates, int max_devices) {
  using chakra_attr::number;
  using chakra_attr::numberOr;
  for (const char* key : {"num_ops", "tensor_size", "comm_size", "cardsim_bytes_read", "cardsim_bytes_written",
                          "cardsim_duration_ps", "cardsim_tiles"}) {
    double v = 0;
    if (number(n, key, &v) && !(v >= 0 && v < 1e30))
      throw TraceError(where + ": " + key + " " + std::to_string(v) + " is not a non-negative size");
  }
  if (communicates && numberOr(n, "comm_size", 0) > sim::FabricModel::kMaxCollectiveBytes)
    throw TraceError(where + ": comm_size " + std::to_string(static_cast<uint64_t>(numberOr(n, "comm_size", 0))) +
                     " bytes is over the fabric model's limit of 2^48 bytes (256 TiB)");
  double e = 0;
  if (number(n, "cardsim_kernel_class", &e) && !(e >= 0 && e < 64 && trace::KernelClass_IsValid(static_cast<int>(e))))
    throw TraceError(where + ": cardsim_kernel_class " + std::to_string(e) +
                     " is not a kernel class of the cardsim trace format");
  if (number(n, "cardsim_dtype", &e) && !(e >= 0 && e < 64 && trace::DataType_IsValid(static_cast<int>(e))))
    throw TraceError(where + ": cardsim_dtype " + std::to_string(e) + " is not a data type of the cardsim trace format");
  for (const char* key : {"cardsim_src_device", "cardsim_dst_device"})
    if (number(n, key, &e) && !(e >= -1 && e < max_devices))
      throw TraceError(where + ": " + key + " " + std::to_string(e) + " is not a device");
}

}  // namespace cardsim::replay
