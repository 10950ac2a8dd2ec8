// What `cardsim replay` prints: the report as a readable table and as JSON.
#pragma once

#include <cstdio>
#include <string>

#include "traces/replay/ReplayReport.h"

namespace cardsim::cli {

// The table, for `what` (the replayed path, and how it was scaled).
void printReport(const replay::Report& r, const std::string& what, FILE* out);
// The same as JSON (keys in the README); `scale`: the ranks a replicated rank stood for (0: none).
std::string jsonReport(const replay::Report& r, const std::string& path, int scale);

}  // namespace cardsim::cli
