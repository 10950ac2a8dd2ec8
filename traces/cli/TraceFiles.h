// The rank files of a recorded run, checked before anything reads them for work: a
// directory must hold rank0..rank<world-1> of one job, each complete and uncorrupted.
#pragma once

#include <map>
#include <string>

namespace cardsim::cli {

// `path` is a directory of rank<N>.cstrace files or one rank file. Returns rank -> file.
// Throws trace::TraceError naming the file (and record) that is wrong or missing. A single
// file, or a directory holding only some ranks of its job, is returned as it is: callers
// that need the whole job compare the count with the header's world size.
// `ended`: each rank's End reason ("exit", "signal SIGTERM", ...), when given.
std::map<int, std::string> traceRankFiles(const std::string& path, std::map<int, std::string>* ended = nullptr);

// Whether `name` (a file name, no directory) is a rank file's, rank<N>.cstrace; sets *rank.
bool isRankFileName(const std::string& name, int* rank = nullptr);

// Removes a directory tree of the CLI's own (temporary files); false if some entry stayed.
bool removeTree(const std::string& dir);

// Why a file could not be written at `path` (a missing or read-only directory, a read-only
// file, a directory in its place), or "" if it can: asked before work whose result goes
// there, so that nothing is computed only to be lost.
std::string unwritableReason(const std::string& path);

// Interrupted (SIGINT, SIGTERM, SIGHUP), this process takes down the helper processes it
// started (childStarted) and removes its temporary directory `dir` before it dies of the
// signal: a replay or sweep cut short leaves nothing running and nothing behind.
void cleanUpOnSignals(const std::string& dir);
void childStarted(int pid, int stop_signal);   // how the handler stops it
void childEnded(int pid);   // reaped: no longer the handler's to stop
// In a helper process just forked: the parent's signal handling is not its own (the
// directory is the parent's to remove); it dies with its parent (a killed replay or sweep
// leaves no orphan spinning), by `signal`.
void helperProcessStarted(int signal);

// Creates directory `dir` and any missing parents; "" on success (or if it exists), else why not.
std::string makeDirectories(const std::string& dir);

// `s` as a JSON string literal.
std::string jsonString(const std::string& s);

}  // namespace cardsim::cli
