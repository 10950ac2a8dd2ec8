// Writes one trace file: the magic, the header, then records, each a varint length and an
// Envelope. Records go into one large buffer that is written out in chunks, so recording
// costs no system call and no heap allocation per record; the caller builds its Envelopes
// on an arena it resets (TraceRecorder does).
//
// close() writes the End record with a CRC-32 of every byte before it; a writer destroyed
// without close() still writes out what it buffered, and readers report that file as
// incomplete. Not thread-safe: the caller serializes writes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "traces/proto/trace.pb.h"

namespace cardsim::trace {

class TraceWriter {
 public:
  static constexpr std::size_t kBufferBytes = 1 << 20;

  // Creates or truncates `path` and writes the magic and `header`, whose format version
  // this sets. Throws TraceError naming the path.
  TraceWriter(const std::string& path, Header header);
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
  void writeOut(const uint8_t* data, std::size_t size);

  std::string path_;
  int fd_ = -1;
  std::vector<uint8_t> buffer_;
  std::size_t used_ = 0;
  uint64_t records_ = 0;
  uint32_t crc_ = 0;   // of every byte handed to the file so far
};

}  // namespace cardsim::trace
