// Replays one rank's recorded trace through the shim of this process: every recorded host
// call again, in the order the calls returned, each starting at its recorded virtual host
// time plus however far this thread's replay has drifted from the recording (so host gaps
// are kept and, on the recording's preset, every call and device command lands at exactly
// its recorded time). Device work is re-timed by the model the process was started with:
// that is the what-if. Runs in timing mode (nothing is computed, no bytes move).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "cardsim/shim.h"
#include "traces/lib/PeersLate.h"
#include "traces/proto/trace.pb.h"

namespace cardsim::replay {

// The what-if cannot hold the recording: its memory is too small for what the recording
// allocated, or its rates carry simulated time past its end. The input's problem (as a bad
// trace is), not the replay's.
class WhatIfError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ReplayOptions {
  // >0: the trace is one rank of a data-parallel job of its world size, replicated to this
  // many ranks: collectives over the whole recorded world run over ranks 0..N-1 instead
  // (no fabric server: each replica arrives when this one does, plus what this one waited
  // there for slower ranks in the recording).
  int scale_ranks = 0;
  double collective_timeout_s = 120;
  // Hand the recorded kernel shapes on to the replay's own trace (only a trace that is
  // written keeps them; the report does not use them).
  bool keep_shapes = true;
  // The file was verified (TraceReader::verify) just before, by the process handing it
  // over: reading it again leaves out the CRC-32.
  bool verified = false;
};

class RankReplayer {
 public:
  RankReplayer(std::string path, ReplayOptions options);
  ~RankReplayer();
  RankReplayer(const RankReplayer&) = delete;
  RankReplayer& operator=(const RankReplayer&) = delete;

  // Reads and replays the whole file. Throws std::runtime_error naming the file, the
  // record and the call that failed.
  void run();

  uint64_t callsReplayed() const { return calls_; }

 private:
  struct HostRegion;
  void replay(const trace::Envelope& e);
  void check(shim::Status s, const trace::Envelope& e, const char* what);
  shim::Stream stream(uint32_t id, const trace::Envelope& e);
  shim::Event event(uint32_t id, const trace::Envelope& e);
  void* devicePointer(uint64_t address, uint64_t bytes, int device, const trace::Envelope& e);
  void* hostPointer(uint64_t address, uint64_t bytes, bool pinned);
  // Creates what `e` uses that the recording never saw made (memory, streams from before
  // it), before the call's own time, so that their set-up does not delay the call.
  void standIns(const trace::Envelope& e);
  // The current memcpy's or memset's pointers, as standIns() resolved them for replay().
  void* dst_ = nullptr;
  const void* src_ = nullptr;
  void alignClock(const trace::Envelope& e);
  void noteClock(const trace::Envelope& e);
  // An event or stream query: a program polling one (queries of it back to back, the last
  // one answered ready) polls the replay's card: it stops once that is done, sooner or
  // later than recorded. Returns false for a call that is no query.
  bool replayQuery(const trace::Envelope& e);
  struct Polling {
    uint64_t key = 0;          // what the thread polls (0: nothing); see replayQuery
    bool done_early = false;   // the replay's card was done before the recording's
  };
  std::map<uint32_t, Polling> polling_;   // per recorded thread

  std::string path_;
  ReplayOptions options_;
  int world_ = 1;
  std::map<uint32_t, std::string> names_;
  std::map<uint32_t, shim::Stream> streams_;
  std::map<uint32_t, shim::Event> events_;
  std::map<uint32_t, shim::Graph> graphs_;
  struct DeviceBlock {
    void* ptr;
    uint64_t bytes;
    int device;
    bool stand_in = false;   // memory the recording never saw allocated: grown to what is used
  };
  std::vector<void*> outgrown_;   // stand-ins replaced by larger ones (kept: copies may still use them)
  std::map<uint64_t, DeviceBlock> device_blocks_;   // by recorded address
  std::map<uint64_t, std::unique_ptr<HostRegion>> host_blocks_;
  std::unique_ptr<HostRegion> pageable_;           // stand-in for the program's own buffers
  std::unique_ptr<HostRegion> pinned_;             // ... and for its pinned ones from before the recording
  std::map<uint32_t, int64_t> drift_ps_;            // per recorded thread: replay - recording
  struct Span {
    uint64_t begin_ps = 0, end_ps = 0;
  };
  std::map<uint32_t, Span> spans_;                  // per recorded thread: its latest call, as recorded
  std::optional<uint32_t> last_thread_;             // the thread of the latest call replayed
  uint64_t calls_ = 0;
  uint64_t record_ = 0;
  // A replicated rank (scale_ranks): each recorded collective call's command, as recorded
  // (its start and end), for what the rank waited there for slower ranks (peersLatePs).
  std::unordered_map<uint64_t, Span> collective_commands_;   // by call
  trace::PeersLate peers_late_;
  void readCollectiveCommands();
  uint64_t peersLatePs(const trace::Envelope& e);
  // The calling thread's current device as this replayer last set it (-1: ask the runtime):
  // the replay makes every call from one thread, and only it changes the device.
  int device_ = -1;
  int currentDevice();
  // setDevice unless already current (`always`: a recorded setDevice, replayed as recorded)
  void useDevice(int device, const trace::Envelope& e, bool always = false);
};

}  // namespace cardsim::replay
