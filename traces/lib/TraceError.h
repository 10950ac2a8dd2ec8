// The error every trace reader and writer failure throws: the message names the file and,
// where it applies, the record index and byte offset.
#pragma once

#include <stdexcept>
#include <string>

namespace cardsim::trace {

class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace cardsim::trace
