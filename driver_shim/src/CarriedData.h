// Timing mode: the host data the cards carry.
//
// Kernels do no work in timing mode and device memory reads as zeros, but a program also
// keeps its own bookkeeping on the card (a length, a list of ids, a flag) that it copies in,
// exchanges between ranks and reads back to decide what to do next. Small host writes
// (copies from the host up to kTimingCarriedBytes, and writes through host views such as a
// collective's results) are therefore done and remembered here, so that the memory can be
// zeroed again when it is handed out anew: what a kernel "computed" always reads as zeros.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace cardsim::shim::simbackend {

class CarriedData {
 public:
  // Remembers that [ptr, ptr + bytes) holds host data.
  void note(const void* ptr, std::size_t bytes);
  // Zeroes and forgets every noted range that starts within [ptr, ptr + bytes) (noted ranges
  // lie within one allocation, and whole allocations are scrubbed). Returns the bytes zeroed.
  std::size_t scrub(void* ptr, std::size_t bytes);
  std::size_t rangesHeld() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> ranges_;   // start -> bytes, non-overlapping
};

}  // namespace cardsim::shim::simbackend
