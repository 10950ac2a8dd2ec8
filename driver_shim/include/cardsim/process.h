// The end of a process that uses the emulated cards. The runtime completes a trace being
// recorded and removes the process's status file at exit and on SIGTERM, SIGHUP or SIGINT
// (where the program left them at their default action). An embedding whose exit path
// skips C's atexit handlers calls runExitCleanups first: Python does after an uncaught
// KeyboardInterrupt (Ctrl-C), so cardsim_torch calls it from Python's atexit.
#pragma once

#include <string>

namespace cardsim::shim {

// Does now, once, what the runtime would do at exit; later calls do nothing. `reason` is
// recorded in a trace's End record ("exit" at a normal exit).
void runExitCleanups(const std::string& reason);

}  // namespace cardsim::shim
