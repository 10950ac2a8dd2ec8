#include "traces/lib/TraceReader.h"

#include <sys/stat.h>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "traces/lib/TraceError.h"
#include "traces/lib/TraceFormat.h"

namespace cardsim::trace {

namespace {
// Small enough to stay in cache and cost little to set up per open; a longer record grows it.
constexpr std::size_t kChunk = 64 << 10;

// Where field `field` stands at the top level of an encoded Envelope, from the wire format
// alone: present, absent, or past what can be walked (the full parse judges that).
enum class FieldScan { Present, Absent, Unwalkable };

bool readVarint(const uint8_t*& p, const uint8_t* end, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p == end) return false;
    const uint8_t b = *p++;
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// Steps `p` over one field's value of wire type `wire`; false if it runs past `end`.
bool skipValue(const uint8_t*& p, const uint8_t* end, uint64_t wire) {
  uint64_t v = 0;
  switch (wire) {
    case 0: return readVarint(p, end, &v);
    case 1: if (end - p < 8) return false; p += 8; return true;
    case 2: if (!readVarint(p, end, &v) || v > static_cast<uint64_t>(end - p)) return false; p += v; return true;
    case 5: if (end - p < 4) return false; p += 4; return true;
    default: return false;
  }
}

FieldScan scanForField(const uint8_t* p, const uint8_t* end, uint32_t field) {
  while (p < end) {
    uint64_t tag = 0;
    if (!readVarint(p, end, &tag)) return FieldScan::Unwalkable;
    if ((tag >> 3) == field) return FieldScan::Present;
    if (!skipValue(p, end, tag & 7)) return FieldScan::Unwalkable;
  }
  return FieldScan::Absent;
}

// The record's kind from its first tag: the writer puts it first (fields in number order,
// the record's oneof numbered below the rest); 0 when the record starts otherwise.
uint32_t leadingKind(const uint8_t* p, const uint8_t* end) {
  if (p == end || (*p & 7) != 2) return 0;
  const uint32_t field = *p >> 3;   // a one-byte tag: fields 1-15
  return field <= Envelope::kEndFieldNumber ? field : 0;
}

// Whether an encoded Envelope has its End field (a record that cannot be walked counts as
// yes, so that the full parse judges it).
bool hasEndField(const uint8_t* p, const uint8_t* end) {
  if (const uint32_t kind = leadingKind(p, end)) return kind == Envelope::kEndFieldNumber;
  return scanForField(p, end, Envelope::kEndFieldNumber) != FieldScan::Absent;
}

// Whether an encoded Envelope is a device command: its kind the Command and no End field
// after it (the last of a oneof's fields wins). One that cannot be walked counts as no.
bool isCommandRecord(const uint8_t* p, const uint8_t* end) {
  return leadingKind(p, end) == Envelope::kCommandFieldNumber &&
         scanForField(p, end, Envelope::kEndFieldNumber) == FieldScan::Absent;
}

// A device command record's times (DeviceCommand start_ps and end_ps, 0 when absent) from
// its wire form, for the check a skipped command still gets; false if it cannot be walked
// (the record leads with its command: isCommandRecord).
bool commandTimes(const uint8_t* p, const uint8_t* end, uint64_t* start_ps, uint64_t* end_ps, uint32_t* name) {
  *start_ps = *end_ps = 0;
  *name = 0;
  uint64_t len = 0;
  ++p;   // the command's one-byte tag
  if (!readVarint(p, end, &len) || len > static_cast<uint64_t>(end - p)) return false;
  const uint8_t* q = p;
  const uint8_t* stop = p + len;
  while (q < stop) {
    uint64_t tag = 0, v = 0;
    if (!readVarint(q, stop, &tag)) return false;
    const uint64_t field = tag >> 3;
    if ((tag & 7) == 0 && (field == DeviceCommand::kStartPsFieldNumber || field == DeviceCommand::kEndPsFieldNumber)) {
      if (!readVarint(q, stop, &v)) return false;
      *(field == DeviceCommand::kStartPsFieldNumber ? start_ps : end_ps) = v;
    } else if ((tag & 7) == 0 && field == DeviceCommand::kNameFieldNumber) {
      if (!readVarint(q, stop, &v)) return false;
      *name = static_cast<uint32_t>(v);
    } else if (!skipValue(q, stop, tag & 7)) {
      return false;
    }
  }
  return true;
}

// Simulated times are picoseconds under 2^63 (106 days): one past that is no recording's.
constexpr uint64_t kMaxTimePs = (uint64_t{1} << 63) - 1;

}  // namespace

TraceReader::TraceReader(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) throw TraceError(path + ": cannot open: " + std::strerror(errno));
  try {
    open();
  } catch (...) {
    close();   // a constructor that throws gets no destructor
    throw;
  }
}

void TraceReader::open() {
  const std::string& path = path_;
  // A small file gets a small buffer.
  struct stat st {};
  const bool sized = ::fstat(::fileno(file_), &st) == 0 && st.st_size > 0;
  buffer_.resize(sized ? std::min<std::size_t>(kChunk, static_cast<std::size_t>(st.st_size) + 16) : kChunk);
  // gzip's magic: decompress as we read (the plain file is inside).
  const int b0 = std::fgetc(file_), b1 = b0 == EOF ? EOF : std::fgetc(file_);
  if (b0 == 0x1f && b1 == 0x8b) {
    gz_ = new z_stream{};
    if (inflateInit2(gz_, 15 + 16) != Z_OK) {
      delete gz_;
      gz_ = nullptr;
      throw TraceError(path + ": cannot start gzip decompression");
    }
    buffer_.resize(kChunk);
    raw_.resize(kChunk);
  }
  std::rewind(file_);
  if (!fill(kMagicSize) || std::memcmp(buffer_.data() + pos_, kMagic, kMagicSize) != 0) {
    if (gz_ && size_ - pos_ < kMagicSize)   // a gzip file cut short: its stream ends early
      throw TraceError(path + ": truncated: the compressed file ends " +
                       (size_ == pos_ ? std::string("before any of its contents")
                                      : "after " + std::to_string(size_ - pos_) + " byte(s) of its contents, inside "
                                        "the CSTRACE magic") +
                       " (compressed offset " + std::to_string(raw_offset_) + ")");
    const bool empty = size_ == 0;
    throw TraceError(path + ": not a cardsim trace (" +
                     (empty ? std::string("the file is empty") : "it does not start with the CSTRACE magic") + ")");
  }
  crc_ = static_cast<uint32_t>(::crc32(0, nullptr, 0));
  crc_from_ = pos_;
  pos_ += kMagicSize;
  offset_ = kMagicSize;
  Envelope first;
  if (!readRecord(&first)) throw TraceError(path + ": truncated: the file ends after the magic, before the header");
  if (first.record_case() != Envelope::kHeader) throw TraceError(path + ": corrupt: record #0 is not the header");
  header_ = first.header();
  // Every cardsim writes major 1 or later: a header without one was not written by it.
  if (header_.format_major() == 0)
    throw TraceError(path + ": corrupt: the header names no trace format version (format_major 0)");
  if (header_.format_major() > kFormatMajor)
    throw TraceError(path + ": trace format " + std::to_string(header_.format_major()) + "." +
                     std::to_string(header_.format_minor()) + " is newer than this cardsim reads (" +
                     std::to_string(kFormatMajor) + "." + std::to_string(kFormatMinor) +
                     "); use a newer cardsim");
}

TraceReader::~TraceReader() { close(); }

void TraceReader::close() {
  if (file_) std::fclose(file_);
  file_ = nullptr;
  if (gz_) {
    inflateEnd(gz_);
    delete gz_;
    gz_ = nullptr;
  }
}

std::size_t TraceReader::readSome(uint8_t* dst, std::size_t n) {
  if (!gz_) {
    const std::size_t got = std::fread(dst, 1, n, file_);
    if (got == 0 && std::ferror(file_)) throw TraceError(path_ + ": read error at offset " + std::to_string(offset_ + size_));
    return got;
  }
  if (gz_end_) return 0;
  gz_->next_out = dst;
  gz_->avail_out = static_cast<uInt>(n);
  while (gz_->avail_out == n) {
    if (gz_->avail_in == 0 && !raw_eof_) {
      const std::size_t got = std::fread(raw_.data(), 1, raw_.size(), file_);
      if (got == 0 && std::ferror(file_))
        throw TraceError(path_ + ": read error at compressed offset " + std::to_string(raw_offset_));
      raw_eof_ = got == 0;
      raw_offset_ += got;
      gz_->next_in = raw_.data();
      gz_->avail_in = static_cast<uInt>(got);
    }
    const int rc = inflate(gz_, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      gz_end_ = true;
      if (gz_->avail_in > 0 || (!raw_eof_ && std::fgetc(file_) != EOF))
        throw TraceError(path_ + ": corrupt: data after the end of the gzip stream");
      break;
    }
    if (rc == Z_BUF_ERROR && raw_eof_) break;   // the compressed stream stops early: a cut file
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      throw TraceError(path_ + ": corrupt: the gzip data does not decompress near compressed offset " +
                       std::to_string(raw_offset_ - gz_->avail_in) + " (" + (gz_->msg ? gz_->msg : "zlib error") + ")");
  }
  return n - gz_->avail_out;
}

std::string TraceReader::where() const {
  return path_ + ": record #" + std::to_string(index_) + " at offset " + std::to_string(offset_);
}

// The file ends inside a record: the records before it are whole. A process killed while it
// wrote its buffer out leaves such a file (a write cut short at a page), as does a copy cut.
std::string TraceReader::endsInside(const std::string& how) const {
  return where() + ": incomplete: the file ends inside this record (" + how + "); the " + std::to_string(index_) +
         " records before it are whole: the recording process did not finish (killed while writing) or the file "
         "was cut";
}

void TraceReader::crcUpTo(std::size_t end) {
  if (end > crc_from_ && !skip_crc_)
    crc_ = static_cast<uint32_t>(::crc32(crc_, buffer_.data() + crc_from_, static_cast<uInt>(end - crc_from_)));
  crc_from_ = end;
}

bool TraceReader::fill(std::size_t need) {
  if (size_ - pos_ >= need) return true;
  if (pos_ > 0) {
    crcUpTo(pos_);
    crc_from_ = 0;
    std::memmove(buffer_.data(), buffer_.data() + pos_, size_ - pos_);
    size_ -= pos_;
    pos_ = 0;
  }
  if (buffer_.size() < need) buffer_.resize(need);
  while (size_ < need) {
    const std::size_t n = readSome(buffer_.data() + size_, buffer_.size() - size_);
    if (n == 0) return false;
    size_ += n;
  }
  return true;
}

bool TraceReader::readRecord(Envelope* record, bool only_end) {
  // The varint length: at most 10 bytes.
  fill(10);
  if (pos_ == size_) return false;   // clean end of file
  uint64_t len = 0;
  std::size_t i = 0;
  for (int shift = 0;; shift += 7, ++i) {
    if (pos_ + i >= size_) throw TraceError(endsInside("truncated inside the record's length prefix"));
    if (i >= 10) throw TraceError(where() + ": corrupt length prefix (more than 10 bytes)");
    const uint8_t b = buffer_[pos_ + i];
    len |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  const std::size_t prefix = i + 1;
  if (len > kMaxRecordBytes)
    throw TraceError(where() + ": corrupt length prefix (" + std::to_string(len) +
                     " bytes, over the format's limit of " + std::to_string(kMaxRecordBytes) + ")");
  if (!fill(prefix + len))
    throw TraceError(endsInside("truncated: the record needs " + std::to_string(len) + " bytes, " +
                                std::to_string(size_ - pos_ - prefix) + " left in the file"));
  const uint8_t* body = buffer_.data() + pos_ + prefix;
  if (only_end && !hasEndField(body, body + len)) {
    record->clear_record();
  } else if (skip_commands_ && isCommandRecord(body, body + len)) {
    record->Clear();   // a device command: its bytes are under the CRC all the same
    uint64_t start_ps = 0, end_ps = 0;
    uint32_t name = 0;
    if (!commandTimes(body, body + len, &start_ps, &end_ps, &name)) {
      if (!record->ParseFromArray(body, static_cast<int>(len)))   // the full parse judges it
        throw TraceError(where() + ": corrupt: the record's " + std::to_string(len) + " bytes do not parse");
      start_ps = record->command().start_ps();
      end_ps = record->command().end_ps();
      name = record->command().name();
      record->Clear();
    }
    // The checks checkValues makes of a command that is read (this record is numbered index_:
    // it is counted below), so that every reader refuses the same files.
    if (end_ps < start_ps || end_ps > kMaxTimePs)
      throw TraceError(path_ + ": record #" + std::to_string(index_) + " at offset " + std::to_string(offset_) +
                       ": corrupt: " + commandTimesProblem(start_ps, end_ps));
    if (name != 0 && !names_.count(name))
      throw TraceError(path_ + ": record #" + std::to_string(index_) + " at offset " + std::to_string(offset_) +
                       ": corrupt: " + unnamedProblem("the device command", name));
  } else if (!record->ParseFromArray(body, static_cast<int>(len)))
    throw TraceError(where() + ": corrupt: the record's " + std::to_string(len) + " bytes do not parse");
  pos_ += prefix + len;
  offset_ += prefix + len;
  ++index_;
  return true;
}

bool TraceReader::next(Envelope* record) { return nextRecord(record, false); }

const Envelope* TraceReader::next() {
  // Each parse leaves its record's parts on the arena; a fresh start every so often keeps
  // it within its first block (records are tens to hundreds of bytes).
  constexpr uint32_t kRecordsPerArena = 1024;
  if (!arena_ || arena_records_ >= kRecordsPerArena) {
    if (arena_block_.empty()) arena_block_.resize(256 << 10);
    google::protobuf::ArenaOptions o;
    o.initial_block = arena_block_.data();
    o.initial_block_size = arena_block_.size();
    arena_record_ = nullptr;
    arena_.reset();   // before the new one takes the block
    arena_ = std::make_unique<google::protobuf::Arena>(o);
    arena_record_ = google::protobuf::Arena::CreateMessage<Envelope>(arena_.get());
    arena_records_ = 0;
  }
  ++arena_records_;
  return nextRecord(arena_record_, false) ? arena_record_ : nullptr;
}

std::string TraceReader::commandTimesProblem(uint64_t start_ps, uint64_t end_ps) {
  if (end_ps < start_ps)
    return "the device command ends (" + std::to_string(end_ps) + " ps) before it starts (" + std::to_string(start_ps) +
           " ps)";
  return "the device command ends at " + std::to_string(end_ps) + " ps, past the simulated clock's range (2^63 ps)";
}

std::string TraceReader::unnamedProblem(const char* what, uint32_t id) {
  return std::string(what) + " uses name id " + std::to_string(id) + ", which no earlier Name record defines";
}

void TraceReader::checkValues(const Envelope& e, uint64_t at) {
  // Values no recorder writes and every consumer would mistime: a record whose bytes parse
  // (its CRC may even be right, if it was written so) but that says something impossible.
  const auto bad = [&](const std::string& what) {
    throw TraceError(path_ + ": record #" + std::to_string(index_ - 1) + " at offset " + std::to_string(at) +
                     ": corrupt: " + what);
  };
  const auto amount = [&](double v, const char* field) {
    if (!(v >= 0) || v > 1e30) {
      char shown[32];
      std::snprintf(shown, sizeof shown, "%g", v);
      bad(std::string(field) + " is " + shown + (v > 1e30 ? " (beyond any recorded amount, 1e30)" : " (not a non-negative amount)"));
    }
  };
  if (e.call() != 0 && e.host_end_ps() < e.host_begin_ps())
    bad("the call returns (host " + std::to_string(e.host_end_ps()) + " ps) before it begins (" +
        std::to_string(e.host_begin_ps()) + " ps)");
  if (e.host_end_ps() > kMaxTimePs)
    bad("the call returns at host " + std::to_string(e.host_end_ps()) + " ps, past the simulated clock's range (2^63 ps)");
  // A name is defined before its first use (0: none given); one never defined is a file
  // spliced or corrupted, which every consumer would show under another name.
  const auto named = [&](uint32_t id, const char* what) {
    if (id != 0 && !names_.count(id)) bad(unnamedProblem(what, id));
  };
  switch (e.record_case()) {
    case Envelope::kName:
      if (e.name().id() == 0) bad("a Name record with id 0 (ids start at 1)");
      names_.insert(e.name().id());
      break;
    case Envelope::kCommand:
      if (e.command().end_ps() < e.command().start_ps() || e.command().end_ps() > kMaxTimePs)
        bad(commandTimesProblem(e.command().start_ps(), e.command().end_ps()));
      named(e.command().name(), "the device command");
      break;
    case Envelope::kKernel:
      named(e.kernel().name(), "the kernel launch");
      amount(e.kernel().flops(), "the kernel's flops");
      amount(e.kernel().bytes_read(), "the kernel's bytes_read");
      amount(e.kernel().bytes_written(), "the kernel's bytes_written");
      break;
    case Envelope::kCollective:
      amount(e.collective().bytes(), "the collective's bytes");
      amount(e.collective().seconds(), "the collective's seconds");
      for (double b : e.collective().send_bytes()) amount(b, "the collective's send_bytes");
      for (double b : e.collective().recv_bytes()) amount(b, "the collective's recv_bytes");
      for (const int given : {e.collective().send_bytes_size(), e.collective().recv_bytes_size()})
        if (given > 0 && given != e.collective().ranks_size())
          bad("the collective has " + std::to_string(given) + " per-member sizes for " +
              std::to_string(e.collective().ranks_size()) + " ranks");
      break;
    default:
      break;
  }
}

void TraceReader::verify() {
  Envelope e;
  while (nextRecord(&e, true)) {
  }
}

bool TraceReader::nextRecord(Envelope* record, bool only_end) {
  if (done_) return false;
  const uint64_t at = offset_;
  if (!readRecord(record, only_end))
    throw TraceError(path_ + ": incomplete: the file ends after record #" + std::to_string(index_ - 1) +
                     " at offset " + std::to_string(at) +
                     " without the End record (the recording process did not finish: it crashed, "
                     "was killed, or is still running)");
  if (record->record_case() == Envelope::kHeader)
    throw TraceError(path_ + ": record #" + std::to_string(index_ - 1) + " at offset " + std::to_string(at) +
                     ": corrupt: a second header");
  if (record->record_case() != Envelope::kEnd) {
    if (!only_end) checkValues(*record, at);
    return true;
  }
  crcUpTo(pos_ - static_cast<std::size_t>(offset_ - at));   // every byte before the End record
  const uint32_t crc_before = crc_;
  end_ = record->end();
  if ((!skip_crc_ && end_.crc32() != crc_before) || end_.records() != index_ - 1)
    throw TraceError(path_ + ": record #" + std::to_string(index_ - 1) + " at offset " + std::to_string(at) +
                     ": corrupt: the End record says " + std::to_string(end_.records()) +
                     " records before it with CRC-32 " + std::to_string(end_.crc32()) + ", the file holds " +
                     std::to_string(index_ - 1) + " with CRC-32 " + std::to_string(crc_before) +
                     " (some byte before it changed)");
  Envelope extra;
  const uint64_t end_at = offset_;
  bool more = false;
  try {
    more = readRecord(&extra);
  } catch (const TraceError&) {   // bytes that are no record at all: extra bytes all the same
    more = true;
  }
  if (more)
    throw TraceError(path_ + ": corrupt: data after the End record (offset " + std::to_string(end_at) +
                     "; the file is complete up to there)");
  if (gz_ && !gz_end_)
    throw TraceError(path_ + ": truncated: the compressed file ends before its gzip trailer (compressed offset " +
                     std::to_string(raw_offset_) + ")");
  done_ = true;
  return false;
}

}  // namespace cardsim::trace
