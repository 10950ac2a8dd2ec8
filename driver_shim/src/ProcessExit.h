// What the runtime must do however a process ends: complete a trace being recorded, remove
// the status file. Three ways out lead here:
//
// - a normal exit: each cleanup has its own std::atexit entry, registered when the cleanup
//   is, so it runs before whatever was started earlier (the simulator) stops;
// - a termination signal whose action was the default when the runtime started (SIGTERM
//   and SIGHUP from a launcher or a closed terminal, SIGINT in a program without its own
//   handler): the handler unlinks the registered files at once (async-signal-safe), then a
//   watcher thread runs the cleanups, bounded in time, and the signal ends the process as it
//   would have (the exit status still says "killed by SIGTERM");
// - runExitCleanups (cardsim/process.h), for exits that skip C's atexit: Python, after an
//   uncaught KeyboardInterrupt, finalizes and then kills itself with SIGINT.
//
// Each cleanup runs once, and only in the process that registered it (a forked child
// inherits neither the trace nor the status file). A second signal during the cleanup ends
// the process at once.
#pragma once

#include <functional>
#include <string>

namespace cardsim::shim::process_exit {

// `reason` is "exit" or "signal SIGTERM" (and so on), or what runExitCleanups was given.
using Cleanup = std::function<void(const std::string& reason)>;

// Registers `fn`; cleanups run in reverse order of registration.
void onExit(Cleanup fn);
// A file the signal handler itself removes before anything else (at most 4, each path
// shorter than 512 bytes; longer ones are left to the cleanups).
void unlinkOnSignal(const std::string& path);
// Runs every cleanup not run yet, newest first.
void runAll(const std::string& reason);
// Longest wait for the cleanups after a signal before the process ends anyway.
constexpr int kSignalCleanupSeconds = 5;

}  // namespace cardsim::shim::process_exit
