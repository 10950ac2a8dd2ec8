#include "traces/lib/TraceWriter.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "traces/lib/TraceError.h"
#include "traces/lib/TraceFormat.h"

namespace cardsim::trace {

namespace {
uint8_t* putVarint(uint64_t v, uint8_t* p) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}
}  // namespace

Compression compressionFromEnvironment() {
  const char* env = std::getenv("CARDSIM_TRACE_COMPRESS");
  return parseCompression(env ? env : "", "CARDSIM_TRACE_COMPRESS");
}

Compression parseCompression(const std::string& v, const std::string& what) {
  Compression c;
  if (v.empty() || v == "0" || v == "none") return c;
  c.gzip = true;
  if (v == "gzip" || v == "1") return c;
  if (v.size() == 6 && v.compare(0, 5, "gzip:") == 0 && v[5] >= '1' && v[5] <= '9') {
    c.level = v[5] - '0';
    return c;
  }
  throw TraceError(what + ": \"" + v + "\" is not a compression (valid: none, gzip, gzip:1 .. gzip:9)");
}

TraceWriter::TraceWriter(const std::string& path, Header header, Compression compression)
    : path_(path), buffer_(kBufferBytes) {
  if (compression.gzip) {
    gz_ = new z_stream{};
    // windowBits 15 + 16: a gzip wrapper, so that zcat and gzip -t read the file too.
    if (deflateInit2(gz_, compression.level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
      delete gz_;
      gz_ = nullptr;
      throw TraceError(path + ": cannot start gzip compression (level " + std::to_string(compression.level) + ")");
    }
    deflated_.resize(deflateBound(gz_, kBufferBytes) + 64);
  }
  // Truncated only once this process holds the file: two live processes of one rank (a
  // child the program started, another job into the same directory) would interleave their
  // records into one unreadable file. The lock lasts until the file is closed (the process
  // ends): a later run into the directory replaces the file, as before.
  const auto fail = [&](const std::string& why) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (gz_) deflateEnd(gz_);
    delete gz_;
    gz_ = nullptr;
    throw TraceError(path + ": " + why);
  };
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(std::string("cannot create the trace file: ") + std::strerror(errno));
  // (A file system without locks, ENOLCK or EOPNOTSUPP, records unguarded, as before.)
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK)
    fail("another live process is recording into this file (a process the program started, with the "
         "same rank, or another job recording into the same directory); this one is not recorded: give "
         "it its own CARDSIM_TRACE directory");
  if (::ftruncate(fd_, 0) != 0) fail(std::string("cannot truncate the trace file: ") + std::strerror(errno));
  std::memcpy(buffer_.data(), kMagic, kMagicSize);
  used_ = kMagicSize;
  header.set_format_major(kFormatMajor);
  header.set_format_minor(kFormatMinor);
  Envelope first;
  *first.mutable_header() = std::move(header);
  append(first);
  flush();   // a file is never empty: killed before its first flush, it still reads as incomplete
}

TraceWriter::~TraceWriter() {
  if (fd_ >= 0) {
    try {
      flush();   // no End: readers report the file as incomplete
    } catch (const TraceError&) {
    }
    ::close(fd_);
  }
  if (gz_) {
    deflateEnd(gz_);
    delete gz_;
  }
}

void TraceWriter::write(const Envelope& record) {
  if (fd_ < 0) throw TraceError(path_ + ": write after the trace was closed");
  append(record);
  // A slow program's buffer can take minutes to fill: written out at least every second
  // (looked at every few hundred records), so that a process killed outright keeps its past.
  constexpr uint64_t kRecordsPerLook = 256;
  if (records_ % kRecordsPerLook == 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_flush_ >= std::chrono::seconds(1)) flush();
  }
}

void TraceWriter::append(const Envelope& record) {
  const std::size_t size = record.ByteSizeLong();
  if (size > kMaxRecordBytes)
    throw TraceError(path_ + ": record #" + std::to_string(records_) + " is " + std::to_string(size) +
                     " bytes, over the format's limit of " + std::to_string(kMaxRecordBytes));
  const std::size_t need = size + 10;
  if (buffer_.size() - used_ < need) flush();
  if (buffer_.size() < need) buffer_.resize(need);   // a record bigger than the buffer: rare
  uint8_t* p = putVarint(size, buffer_.data() + used_);
  p = record.SerializeWithCachedSizesToArray(p);
  used_ = static_cast<std::size_t>(p - buffer_.data());
  ++records_;
}

void TraceWriter::flush() {
  if (fd_ < 0 || used_ == 0) return;
  crc_ = static_cast<uint32_t>(::crc32(crc_, buffer_.data(), static_cast<uInt>(used_)));
  writeOut(buffer_.data(), used_);
  used_ = 0;
  last_flush_ = std::chrono::steady_clock::now();
}

void TraceWriter::writeOut(const uint8_t* data, std::size_t size, bool finish) {
  if (!gz_) return writeRaw(data, size);
  // A sync flush per write-out: everything so far decodes even if the process dies next.
  gz_->next_in = const_cast<Bytef*>(data);
  gz_->avail_in = static_cast<uInt>(size);
  for (;;) {
    gz_->next_out = deflated_.data();
    gz_->avail_out = static_cast<uInt>(deflated_.size());
    const int rc = deflate(gz_, finish ? Z_FINISH : Z_SYNC_FLUSH);
    if (rc == Z_STREAM_ERROR) throw TraceError(path_ + ": gzip compression failed");
    writeRaw(deflated_.data(), deflated_.size() - gz_->avail_out);
    if (finish ? rc == Z_STREAM_END : (gz_->avail_out != 0 && gz_->avail_in == 0)) break;
  }
}

void TraceWriter::writeRaw(const uint8_t* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd_, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw TraceError(path_ + ": cannot write the trace: " + std::strerror(errno));
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

void TraceWriter::close(End end) {
  if (fd_ < 0) return;
  const uint32_t crc = static_cast<uint32_t>(::crc32(crc_, buffer_.data(), static_cast<uInt>(used_)));
  end.set_records(records_);
  end.set_crc32(crc);
  Envelope last;
  *last.mutable_end() = std::move(end);
  append(last);
  crc_ = static_cast<uint32_t>(::crc32(crc_, buffer_.data(), static_cast<uInt>(used_)));
  writeOut(buffer_.data(), used_, /*finish=*/true);
  used_ = 0;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw TraceError(path_ + ": cannot close the trace: " + std::strerror(errno));
}

}  // namespace cardsim::trace
