// Reads one trace file written by TraceWriter, checking as it goes: the magic (a foreign
// file), the format version (a newer major is refused), every length prefix and record
// (truncation, corruption), and at the End record the record count and CRC-32. Errors are
// TraceError naming the file and, where it applies, the record index and byte offset.
// A gzip-compressed trace (CARDSIM_TRACE_COMPRESS) reads the same: it is decompressed on
// the fly, offsets counting the decompressed bytes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include <google/protobuf/arena.h>

#include "traces/proto/trace.pb.h"

struct z_stream_s;

namespace cardsim::trace {

// Records that only move a host thread's virtual clock (a join, the autograd hand-off) and
// do no work: a makespan starts at the first call that is not one of them. Their begin is
// where the clock was before the jump (0 for a replay's first alignment).
inline bool movesClockOnly(const Envelope& e) {
  if (e.record_case() != Envelope::kApi) return false;
  const ApiCall::Api a = e.api().api();
  return a == ApiCall::CLOCK_JOIN || a == ApiCall::CLOCK_SHARE_BEGIN || a == ApiCall::CLOCK_SHARE_END;
}

class TraceReader {
 public:
  // Opens `path` and reads its header. Throws TraceError.
  explicit TraceReader(const std::string& path);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  const Header& header() const { return header_; }
  const std::string& path() const { return path_; }

  // Reads the next record after the header into `record`; returns false once the End
  // record has been read and checked (it is then in end()). Records of kinds this reader
  // does not know (a newer minor version) come back with no record set.
  bool next(Envelope* record);
  // The same, into a message the reader owns, valid until the next call: parsed on an arena
  // the reader recycles every few thousand records, so that reading allocates nothing per
  // record (a replay reads tens of thousands per rank). Null once the End record is read.
  const Envelope* next();
  // Device command records (what the recorded run's commands did: a replay re-times them
  // rather than reads them) come back empty, without being parsed: only their times are
  // checked (as next() checks them), besides the file's CRC-32 and record count.
  void skipCommands(bool skip) { skip_commands_ = skip; }
  // Leaves out the CRC-32 (about a twentieth of reading): for a file verify() has checked
  // just before, in this process or the one that handed it over. Records are still checked
  // one by one, and the End record's count.
  void skipCrc(bool skip) { skip_crc_ = skip; }
  const End& end() const { return end_; }
  // Reads to the End record checking what next() checks, but parses only the End: every
  // byte is still under its CRC-32 and the record count, at a fraction of next()'s cost.
  // For validating a file before handing it to something that reads it again.
  void verify();

  uint64_t recordIndex() const { return index_; }   // records read, the header included
  uint64_t offset() const { return offset_; }       // bytes consumed

 private:
  // Reads one length-delimited record into `record`; false at a clean end of file.
  // With `only_end`, a record without the End field is not parsed (record left empty).
  bool readRecord(Envelope* record, bool only_end = false);
  bool nextRecord(Envelope* record, bool only_end);
  bool fill(std::size_t need);   // at least `need` unread bytes buffered; false at EOF
  // Up to `n` bytes of the (decompressed) file into `dst`; 0 at its end.
  std::size_t readSome(uint8_t* dst, std::size_t n);
  void open();    // the constructor's checks, after the file is open
  void checkValues(const Envelope& e, uint64_t at);   // throws on impossible values
  static std::string unnamedProblem(const char* what, uint32_t id);
  std::unordered_set<uint32_t> names_;   // Name ids defined so far (each before its first use)
  static std::string commandTimesProblem(uint64_t start_ps, uint64_t end_ps);
  void close();
  std::string endsInside(const std::string& how) const;
  std::string where() const;

  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<uint8_t> buffer_;
  std::size_t pos_ = 0, size_ = 0;   // unread bytes are buffer_[pos_, size_)
  uint64_t offset_ = 0;
  uint64_t index_ = 0;
  // CRC-32 of the consumed bytes before buffer_[crc_from_]; the rest of the consumed bytes,
  // [crc_from_, pos_), are added in blocks (per record, zlib's CRC costs more than parsing).
  uint32_t crc_ = 0;
  std::size_t crc_from_ = 0;
  void crcUpTo(std::size_t end);
  Header header_;
  End end_;
  bool done_ = false;
  bool skip_commands_ = false;
  bool skip_crc_ = false;
  z_stream_s* gz_ = nullptr;        // the inflate stream of a compressed file
  // next()'s message and its arena (starting in arena_block_, so a reset costs no allocation).
  std::vector<char> arena_block_;
  std::unique_ptr<google::protobuf::Arena> arena_;
  Envelope* arena_record_ = nullptr;
  uint32_t arena_records_ = 0;
  std::vector<uint8_t> raw_;        // its compressed input
  bool raw_eof_ = false, gz_end_ = false;
  uint64_t raw_offset_ = 0;         // compressed bytes read from the file
};

}  // namespace cardsim::trace
