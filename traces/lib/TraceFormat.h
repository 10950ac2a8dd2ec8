// Constants of the trace file format (see traces/proto/trace.proto for the layout).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cardsim::trace {

// The format this build writes and the newest major it reads.
constexpr uint32_t kFormatMajor = 1;
// 1: Collective.p2p, tag, posted_event; 2: recorded with fabric protocol 5, whose server may
// move an answered collective's end later (a replay of an older recording does not: it
// reproduces the recorded times); 3: a collective starts on its stream at its call, its
// launch overhead overlapping it (a replay of an older recording starts it after); 4:
// Memcpy.host_pinned; 5: Collective.send_bytes, recv_bytes (an uneven all_to_all's per-member sizes).
constexpr uint32_t kFormatMinor = 7;

// The first bytes of every trace file.
constexpr char kMagic[] = "CSTRACE\n";
constexpr std::size_t kMagicSize = 8;

// EventOp.flags of a CREATE (the shim's EventFlags, which the recorder checks against these):
// an event the runtime made for itself, not the program (shim kEventRuntimeMarker).
constexpr uint32_t kEventFlagDisableTiming = 1;
constexpr uint32_t kEventFlagRuntimeMarker = 8;

// "rank<N>.cstrace" in a trace directory.
constexpr char kFileExtension[] = ".cstrace";

// No record is anywhere near this big (the header, with the resolved preset, is tens of
// KiB): a larger length prefix means the file is corrupt, not that it needs that much memory.
constexpr uint64_t kMaxRecordBytes = 64ull << 20;

// The settings of a recorded run (Header.environment) that a replay of it takes over: the
// collectives' algorithm preference, the node count, the fabric's rules of its version.
constexpr const char* kReplayedEnvironment[] = {"CARDSIM_COLL_ALGO", "CARDSIM_NODES", "CARDSIM_FABRIC_REVISE",
                                                "CARDSIM_COLL_START"};

}  // namespace cardsim::trace
