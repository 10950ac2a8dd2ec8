// Writes one trace file: the magic, the header, then records, each a varint length and an
// Envelope. Records go into one large buffer that is written out in chunks, so recording
// costs no system call and no heap allocation per record; the caller builds its Envelopes
// on an arena it resets (TraceRecorder does).
//
// With gzip compression the file is one gzip stream of exactly those bytes (zcat restores
// the plain file), flushed to a decodable point at every buffer write-out, so that a
// process killed mid-run still leaves a readable (incomplete) trace.
//
// close() writes the End record with a CRC-32 of every byte before it; a writer destroyed
// without close() still writes out what it buffered, and readers report that file as
// incomplete. Not thread-safe: the caller serializes writes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "traces/proto/trace.pb.h"

struct z_stream_s;

namespace cardsim::trace {

struct Compression {
  bool gzip = false;
  int level = 6;   // zlib's 1 (fastest) .. 9 (smallest)
};
// A compression by name: "", "0" or "none": none; "gzip" or "1": gzip at level 6; "gzip:N":
// level N. Throws TraceError naming `what` (where the value came from) and the value otherwise.
Compression parseCompression(const std::string& value, const std::string& what);
// CARDSIM_TRACE_COMPRESS (unset: none), as parseCompression reads it.
Compression compressionFromEnvironment();

class TraceWriter {
 public:
  static constexpr std::size_t kBufferBytes = 1 << 20;

  // Creates or truncates `path` and writes the magic and `header`, whose format version
  // this sets. Throws TraceError naming the path.
  TraceWriter(const std::string& path, Header header, Compression compression = {});
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Appends one record. Throws TraceError if the file cannot be written.
  void write(const Envelope& record);
  // Writes out the buffer.
  void flush();
  // Writes the End record (its `records` and `crc32` filled in here), flushes and closes.
  void close(End end);

  const std::string& path() const { return path_; }
  uint64_t records() const { return records_; }
  bool closed() const { return fd_ < 0; }

 private:
  void append(const Envelope& record);
  void writeOut(const uint8_t* data, std::size_t size, bool finish = false);
  void writeRaw(const uint8_t* data, std::size_t size);

  std::string path_;
  int fd_ = -1;
  std::vector<uint8_t> buffer_;
  std::size_t used_ = 0;
  uint64_t records_ = 0;
  std::chrono::steady_clock::time_point last_flush_ = std::chrono::steady_clock::now();
  uint32_t crc_ = 0;   // of every byte handed to the file so far (before compression)
  z_stream_s* gz_ = nullptr;        // the deflate stream, when compressing
  std::vector<uint8_t> deflated_;   // its output, on its way to the file
};

}  // namespace cardsim::trace
