// How the fabric server and its clients name a collective's process group in messages.
#pragma once

#include <string>

namespace cardsim::sim {

// A group's key is "RANKS#N" (torch_mlu / torch_supa number the groups created over the same
// ranks: the default group and new_group() of all ranks are "0,1,2#0" and "0,1,2#1"), with
// " p2p ..." after it for point-to-point transfers. Past the first, the note tells them apart.
inline std::string groupInstanceNote(const std::string& group_key) {
  const std::size_t hash = group_key.find('#');
  if (hash == std::string::npos) return "";
  // The key comes from a client: digits only, and no number a message could not print.
  unsigned long n = 0;
  std::size_t end = hash + 1;
  for (; end < group_key.size() && group_key[end] >= '0' && group_key[end] <= '9'; ++end) {
    if (n > 100000000UL) return "";
    n = n * 10 + static_cast<unsigned long>(group_key[end] - '0');
  }
  if (end == hash + 1 || n == 0) return "";
  const unsigned long nth = n + 1;
  const char* suffix = (nth % 100 >= 11 && nth % 100 <= 13) ? "th"
                       : nth % 10 == 1                      ? "st"
                       : nth % 10 == 2                      ? "nd"
                       : nth % 10 == 3                      ? "rd"
                                                            : "th";
  return " (the " + std::to_string(nth) + suffix + " group created over these ranks)";
}

}  // namespace cardsim::sim
