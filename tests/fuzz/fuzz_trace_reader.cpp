// Fuzz target: the trace reader (traces/lib/TraceReader) on arbitrary bytes. Any input may
// be refused with TraceError; anything else (a crash, another exception, a sanitizer
// report) is a bug.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "traces/lib/TraceError.h"
#include "traces/lib/TraceReader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader takes a path: an in-memory file keeps the fuzzer off the disk.
  static const int fd = memfd_create("cardsim-fuzz-trace", 0);
  if (fd < 0) std::abort();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    cardsim::trace::TraceReader reader(path);
    cardsim::trace::Envelope e;
    while (reader.next(&e)) {
    }
  } catch (const cardsim::trace::TraceError&) {
  }
  return 0;
}
