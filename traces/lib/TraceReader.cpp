#include "traces/lib/TraceReader.h"

#include <sys/stat.h>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "traces/lib/TraceError.h"
#include "traces/lib/TraceFormat.h"

namespace cardsim::trace {

namespace {
constexpr std::size_t kChunk = 1 << 20;
}

TraceReader::TraceReader(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) throw TraceError(path + ": cannot open: " + std::strerror(errno));
  // A small file gets a small buffer (zero-filling 1 MiB per open dominates reading one).
  struct stat st {};
  const bool sized = ::fstat(::fileno(file_), &st) == 0 && st.st_size > 0;
  buffer_.resize(sized ? std::min<std::size_t>(kChunk, static_cast<std::size_t>(st.st_size) + 16) : kChunk);
  if (!fill(kMagicSize) || std::memcmp(buffer_.data() + pos_, kMagic, kMagicSize) != 0) {
    const bool empty = size_ == 0;
    std::fclose(file_);
    file_ = nullptr;
    throw TraceError(path + ": not a cardsim trace (" +
                     (empty ? std::string("the file is empty") : "it does not start with the CSTRACE magic") + ")");
  }
  crc_ = static_cast<uint32_t>(::crc32(0, buffer_.data() + pos_, static_cast<uInt>(kMagicSize)));
  pos_ += kMagicSize;
  offset_ = kMagicSize;
  Envelope first;
  try {
    if (!readRecord(&first))
      throw TraceError(path + ": truncated: the file ends after the magic, before the header");
  } catch (...) {
    std::fclose(file_);
    file_ = nullptr;
    throw;
  }
  if (first.record_case() != Envelope::kHeader) {
    std::fclose(file_);
    file_ = nullptr;
    throw TraceError(path + ": corrupt: record #0 is not the header");
  }
  header_ = first.header();
  if (header_.format_major() > kFormatMajor) {
    std::fclose(file_);
    file_ = nullptr;
    throw TraceError(path + ": trace format " + std::to_string(header_.format_major()) + "." +
                     std::to_string(header_.format_minor()) + " is newer than this cardsim reads (" +
                     std::to_string(kFormatMajor) + "." + std::to_string(kFormatMinor) +
                     "); use a newer cardsim");
  }
}

TraceReader::~TraceReader() {
  if (file_) std::fclose(file_);
}

std::string TraceReader::where() const {
  return path_ + ": record #" + std::to_string(index_) + " at offset " + std::to_string(offset_);
}

bool TraceReader::fill(std::size_t need) {
  if (size_ - pos_ >= need) return true;
  if (pos_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + pos_, size_ - pos_);
    size_ -= pos_;
    pos_ = 0;
  }
  if (buffer_.size() < need) buffer_.resize(need);
  while (size_ < need) {
    const std::size_t n = std::fread(buffer_.data() + size_, 1, buffer_.size() - size_, file_);
    if (n == 0) {
      if (std::ferror(file_)) throw TraceError(path_ + ": read error at offset " + std::to_string(offset_ + size_));
      return false;
    }
    size_ += n;
  }
  return true;
}

bool TraceReader::readRecord(Envelope* record) {
  // The varint length: at most 10 bytes.
  fill(10);
  if (pos_ == size_) return false;   // clean end of file
  uint64_t len = 0;
  std::size_t i = 0;
  for (int shift = 0;; shift += 7, ++i) {
    if (pos_ + i >= size_)
      throw TraceError(where() + ": truncated inside the record's length prefix");
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
    throw TraceError(where() + ": truncated: the record needs " + std::to_string(len) + " bytes, " +
                     std::to_string(size_ - pos_ - prefix) + " left in the file");
  const uint8_t* body = buffer_.data() + pos_ + prefix;
  if (!record->ParseFromArray(body, static_cast<int>(len)))
    throw TraceError(where() + ": corrupt: the record's " + std::to_string(len) + " bytes do not parse");
  crc_ = static_cast<uint32_t>(::crc32(crc_, buffer_.data() + pos_, static_cast<uInt>(prefix + len)));
  pos_ += prefix + len;
  offset_ += prefix + len;
  ++index_;
  return true;
}

bool TraceReader::next(Envelope* record) {
  if (done_) return false;
  const uint32_t crc_before = crc_;
  const uint64_t at = offset_;
  if (!readRecord(record))
    throw TraceError(path_ + ": incomplete: the file ends after record #" + std::to_string(index_ - 1) +
                     " at offset " + std::to_string(at) +
                     " without the End record (the recording process did not finish: it crashed, "
                     "was killed, or is still running)");
  if (record->record_case() == Envelope::kHeader)
    throw TraceError(path_ + ": record #" + std::to_string(index_ - 1) + " at offset " + std::to_string(at) +
                     ": corrupt: a second header");
  if (record->record_case() != Envelope::kEnd) return true;
  end_ = record->end();
  if (end_.crc32() != crc_before || end_.records() != index_ - 1)
    throw TraceError(path_ + ": record #" + std::to_string(index_ - 1) + " at offset " + std::to_string(at) +
                     ": corrupt: the End record says " + std::to_string(end_.records()) +
                     " records before it with CRC-32 " + std::to_string(end_.crc32()) + ", the file holds " +
                     std::to_string(index_ - 1) + " with CRC-32 " + std::to_string(crc_before) +
                     " (some byte before it changed)");
  Envelope extra;
  if (readRecord(&extra))
    throw TraceError(path_ + ": corrupt: data after the End record (offset " + std::to_string(offset_) + ")");
  done_ = true;
  return false;
}

}  // namespace cardsim::trace
