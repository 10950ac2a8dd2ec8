// Fuzz target: the Chakra importer (traces/replay/ChakraImport: a Chakra ET file, length-
// delimited protobuf, and ASTRA-sim's process-group JSON, both outside input) on arbitrary
// bytes. The input is up to three parts separated by kSeparator: rank 0's .et file, the
// comm_groups.json file, rank 1's .et file. Any input may be refused with TraceError;
// anything else (a crash, another exception, a sanitizer report) is a bug.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "traces/lib/TraceError.h"
#include "traces/replay/ChakraImport.h"

namespace {

constexpr std::string_view kSeparator = "\n@@part@@\n";

void writeFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) std::abort();
}

// A directory of this process's own (under /dev/shm when there is one: no disk per input).
const std::string& workDir() {
  static const std::string dir = [] {
    std::string base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string d = base + "/cardsim-fuzz-chakra-" + std::to_string(::getpid());
    ::mkdir(d.c_str(), 0700);
    ::mkdir((d + "/out").c_str(), 0700);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  for (std::size_t pos = 0;;) {
    const std::size_t at = input.find(kSeparator, pos);
    if (at == std::string_view::npos || parts.size() == 2) {
      parts.push_back(input.substr(pos));
      break;
    }
    parts.push_back(input.substr(pos, at - pos));
    pos = at + kSeparator.size();
  }
  const std::string prefix = workDir() + "/w";
  writeFile(prefix + ".0.et", parts[0]);
  const std::string groups = prefix + ".comm_groups.json";
  const std::string rank1 = prefix + ".1.et";
  if (parts.size() > 1) writeFile(groups, parts[1]);
  else ::unlink(groups.c_str());
  if (parts.size() > 2) writeFile(rank1, parts[2]);
  else ::unlink(rank1.c_str());
  try {
    cardsim::replay::importChakra(prefix, workDir() + "/out");
  } catch (const cardsim::trace::TraceError&) {
  }
  return 0;
}
