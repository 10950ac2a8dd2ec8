// Writing an export's output so that a failure leaves nothing behind: through a temporary
// file next to it, renamed into place once complete (an earlier file at the path stays
// whole until then). A path that is not a plain file (a pipe, a terminal, /dev/stdout) is
// written in place. Every write error, at the end as well (a full disk), is reported.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace cardsim::timeline {

// Throws std::runtime_error "PATH: cannot write: <reason>".
void writeOutputFile(const std::string& path, const std::function<void(std::ostream&)>& write);

}  // namespace cardsim::timeline
