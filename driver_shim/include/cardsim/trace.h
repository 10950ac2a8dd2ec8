// Recording traces of what a process does on the emulated cards (traces/proto/trace.proto):
// every shim call with its virtual host times and arguments (allocations, copies, kernel
// launches with their cost descriptors, events, streams, graphs, collectives) and every
// device command with its simulated start and end, one file per rank,
// `<directory>/rank<N>.cstrace` (N = the RANK environment variable, else 0).
//
// `CARDSIM_TRACE=<directory>` records the whole run from the first call that does work on
// a card (a process that only queries devices, such as a launcher counting them, leaves no
// file). traceStart/traceStop record a part of a run. Stopping, and the end of the process
// (at exit), waits for the devices the trace used, as a synchronize does, so that every
// recorded command has its device times, then writes the End record that marks the file
// complete; a process that dies first leaves a file that readers report as incomplete.
//
// Plain C++17 and a C interface for callers without C++ (Python's ctypes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cardsim/shim.h"

namespace cardsim::trace {
class Header;     // traces/proto/trace.proto
class Envelope;
}  // namespace cardsim::trace

namespace cardsim::shim {

// Receives a trace's records as they are made, in this process: for tools that sum up a run
// without writing a file and reading it back (cardsim replay's rank processes). Called on
// the recording thread under the recorder's lock: it must not call the shim.
class TraceObserver {
 public:
  virtual ~TraceObserver() = default;
  virtual void onHeader(const trace::Header& header) = 0;
  // Every record in file order (names before the commands that use them); valid during the
  // call only.
  virtual void onRecord(const trace::Envelope& record) = 0;
};

// Starts recording into `directory` (created if missing; an existing rank file is
// replaced). Fails if a trace is already being recorded. `compression`: empty follows
// CARDSIM_TRACE_COMPRESS; otherwise "none", "gzip" or "gzip:1" .. "gzip:9" (InvalidValue
// naming the value for anything else).
Status traceStart(const std::string& directory, const std::string& compression = "");
// As traceStart, with every record also handed to `observer` (not owned: it must outlive
// traceStop). An empty `directory`: no file is written, the observer gets the records.
Status traceStartObserved(const std::string& directory, TraceObserver* observer, const std::string& compression = "");
// Stops recording and completes the file. Fails if no trace is being recorded.
Status traceStop();
// Whether this thread's calls are recorded (default true): a tool's own calls beside the
// program's (a replay making stand-ins for memory and streams from before a recording) are
// left out of the trace with false.
void traceThisThread(bool recorded);
// Whether a trace is being recorded, and into which file (empty if none); CARDSIM_TRACE
// counts from the start, its file written from the first call that does something on a card.
bool traceActive(std::string* path = nullptr);

// Whether this process records (or is armed to record) a trace: one atomic read, for
// callers deciding whether to collect what only a trace keeps.
bool traceRecording();
// The operand shapes (inputs, then the last `outputs` of them, its outputs) of the next
// kernel this thread launches, which the trace keeps in that kernel's record. Ignored when
// no trace is recording.
void traceNextKernelShapes(std::vector<std::vector<int64_t>> shapes, uint32_t outputs);

}  // namespace cardsim::shim

extern "C" {
// 0 on success; otherwise the shim Code, with the message in `error` (NUL-terminated,
// truncated to `error_size` bytes).
int cardsim_trace_start(const char* directory, char* error, std::size_t error_size);
// As cardsim_trace_start, with the compression named (NULL or "": CARDSIM_TRACE_COMPRESS).
int cardsim_trace_start_compressed(const char* directory, const char* compression, char* error,
                                   std::size_t error_size);
int cardsim_trace_stop(char* error, std::size_t error_size);
// The file being recorded into `path` (NUL-terminated); 1 if recording, else 0.
int cardsim_trace_active(char* path, std::size_t path_size);
}
