// The trace file format (traces/lib): writer/reader round trip, refusal of a newer major
// version, and detection of foreign, truncated and corrupted files.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <iterator>
#include <string>
#include <thread>
#include <vector>
#include <chrono>

#include "traces/lib/TraceError.h"
#include "traces/lib/TraceFormat.h"
#include "traces/lib/TraceReader.h"
#include "traces/lib/TraceWriter.h"

namespace trace = cardsim::trace;

namespace {

std::string tempPath(const std::string& name) {
  return ::testing::TempDir() + "/cardsim_trace_" + std::to_string(::getpid()) + "_" + name;
}

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void writeAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

trace::Header sampleHeader() {
  trace::Header h;
  h.set_preset("mlu370-x8");
  h.set_rank(3);
  h.set_world_size(4);
  h.set_config_text("name: \"mlu370-x8\"\n");
  return h;
}

// A file with `kernels` kernel launches and as many device commands.
std::string writeSample(const std::string& name, int kernels, trace::Compression compression = {}) {
  const std::string path = tempPath(name);
  trace::TraceWriter w(path, sampleHeader(), compression);
  trace::Envelope e;
  e.mutable_name()->set_id(1);
  e.mutable_name()->set_text("aten::mm");
  w.write(e);
  for (int i = 0; i < kernels; ++i) {
    e.Clear();
    e.set_call(static_cast<uint64_t>(i) + 1);
    e.set_host_begin_ps(1000u * i);
    e.set_host_end_ps(1000u * i + 500);
    e.mutable_kernel()->set_name(1);
    e.mutable_kernel()->set_flops(2.0 * i);
    w.write(e);
    e.Clear();
    e.mutable_command()->set_call(static_cast<uint64_t>(i) + 1);
    e.mutable_command()->set_end_ps(1000u * i + 900);
    w.write(e);
  }
  trace::End end;
  end.set_reason("stop");
  w.close(end);
  return path;
}

// The reader's error for `path`, read to the end ("" if it reads cleanly).
std::string readError(const std::string& path) {
  try {
    trace::TraceReader r(path);
    trace::Envelope e;
    while (r.next(&e)) {
    }
  } catch (const trace::TraceError& e) {
    return e.what();
  }
  return "";
}

// The same file through verify(), which parses only the End record.
std::string verifyError(const std::string& path) {
  try {
    trace::TraceReader r(path);
    r.verify();
  } catch (const trace::TraceError& e) {
    return e.what();
  }
  return "";
}

// Cuts `bytes` at every offset into `path`: each shorter file must be an error naming it,
// through next() and through verify().
void expectEveryCutDetected(const std::string& bytes, const std::string& path) {
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
    writeAll(path, bytes.substr(0, cut));
    const std::string err = readError(path);
    ASSERT_FALSE(err.empty()) << "cut at " << cut << " of " << bytes.size() << " read cleanly";
    EXPECT_EQ(err.rfind(path, 0), 0u) << err;
    const std::string verr = verifyError(path);
    ASSERT_FALSE(verr.empty()) << "cut at " << cut << " of " << bytes.size() << " verified cleanly";
    EXPECT_EQ(verr.rfind(path, 0), 0u) << verr;
  }
}

}  // namespace

TEST(TraceFormat, RoundTripKeepsHeaderRecordsAndOrder) {
  // Enough records to cross several writer buffer flushes.
  const int n = 40000;
  const std::string path = writeSample("roundtrip", n);
  trace::TraceReader r(path);
  EXPECT_EQ(r.header().format_major(), trace::kFormatMajor);
  EXPECT_EQ(r.header().format_minor(), trace::kFormatMinor);
  EXPECT_EQ(r.header().preset(), "mlu370-x8");
  EXPECT_EQ(r.header().rank(), 3);
  EXPECT_EQ(r.header().world_size(), 4);
  trace::Envelope e;
  ASSERT_TRUE(r.next(&e));
  EXPECT_EQ(e.name().text(), "aten::mm");
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(r.next(&e));
    ASSERT_EQ(e.record_case(), trace::Envelope::kKernel);
    EXPECT_EQ(e.call(), static_cast<uint64_t>(i) + 1);
    EXPECT_EQ(e.kernel().flops(), 2.0 * i);
    ASSERT_TRUE(r.next(&e));
    ASSERT_EQ(e.record_case(), trace::Envelope::kCommand);
    EXPECT_EQ(e.command().end_ps(), 1000u * i + 900);
  }
  EXPECT_FALSE(r.next(&e));
  EXPECT_EQ(r.end().reason(), "stop");
  EXPECT_EQ(r.end().records(), static_cast<uint64_t>(2 + 2 * n));
  EXPECT_FALSE(r.next(&e));   // stays at the end
  std::remove(path.c_str());
}

TEST(TraceFormat, ReadingIntoTheReadersOwnMessageGivesTheSameRecordsAndCanSkipCommands) {
  // next() without a message parses on an arena the reader recycles every 1024 records:
  // across several recyclings every record reads as next(&e) reads it. With skipCommands,
  // the device commands come back empty and the rest the same; the End is still checked.
  const int n = 3000;
  const std::string path = writeSample("arena", n);
  for (const bool skip : {false, true}) {
    trace::TraceReader a(path), b(path);
    b.skipCommands(skip);
    trace::Envelope e;
    uint64_t records = 0, empty = 0;
    while (a.next(&e)) {
      const trace::Envelope* got = b.next();
      ASSERT_NE(got, nullptr) << "record " << records;
      if (skip && e.record_case() == trace::Envelope::kCommand) {
        EXPECT_EQ(got->record_case(), trace::Envelope::RECORD_NOT_SET);
        EXPECT_EQ(got->call(), 0u);   // nothing left over from the record before
        ++empty;
      } else {
        EXPECT_EQ(got->SerializeAsString(), e.SerializeAsString()) << "record " << records;
      }
      ++records;
    }
    EXPECT_EQ(b.next(), nullptr);
    EXPECT_EQ(b.end().records(), a.end().records());
    EXPECT_EQ(records, static_cast<uint64_t>(1 + 2 * n));
    EXPECT_EQ(empty, skip ? static_cast<uint64_t>(n) : 0u);
  }
  // A skipped command is still under the CRC: a corrupted byte inside one is found.
  std::string bytes = readAll(path);
  const std::string cut = tempPath("arena_corrupt");
  trace::TraceReader probe(path);
  trace::Envelope e;
  (void)probe.next(&e);   // the name
  (void)probe.next(&e);   // the first kernel
  const uint64_t at = probe.offset();   // the first command record starts here
  bytes[at + 4] = static_cast<char>(bytes[at + 4] ^ 0x01);
  writeAll(cut, bytes);
  std::string err;
  try {
    trace::TraceReader r(cut);
    r.skipCommands(true);
    while (r.next()) {
    }
  } catch (const trace::TraceError& x) {
    err = x.what();
  }
  EXPECT_NE(err.find(cut), std::string::npos) << err;
  EXPECT_NE(err.find("CRC"), std::string::npos) << err;
  // skipCrc (a file verified just before, by whoever hands it over) reads past that byte,
  // and still counts the records against the End's.
  {
    trace::TraceReader r(cut);
    r.skipCommands(true);
    r.skipCrc(true);
    uint64_t records = 0;
    while (r.next()) ++records;
    EXPECT_EQ(records, static_cast<uint64_t>(1 + 2 * n));
    EXPECT_EQ(r.end().records(), records + 1);   // the End counts the header too
  }
  std::remove(cut.c_str());
  std::remove(path.c_str());
}

TEST(TraceFormat, NewerMajorVersionIsRefusedNamingFileAndVersions) {
  const std::string path = tempPath("newer");
  trace::Envelope e;
  e.mutable_header()->set_format_major(trace::kFormatMajor + 1);
  e.mutable_header()->set_format_minor(7);
  std::string body = e.SerializeAsString();
  std::string bytes(trace::kMagic, trace::kMagicSize);
  bytes += static_cast<char>(body.size());   // < 128: one varint byte
  bytes += body;
  writeAll(path, bytes);
  const std::string err = readError(path);
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find(std::to_string(trace::kFormatMajor + 1) + ".7"), std::string::npos) << err;
  EXPECT_NE(err.find(std::to_string(trace::kFormatMajor) + "." + std::to_string(trace::kFormatMinor)),
            std::string::npos)
      << err;
  std::remove(path.c_str());
}

TEST(TraceFormat, AHeaderWithoutAFormatVersionIsRefused) {
  // format_major 0 is no field on the wire: a header a cardsim writer never made.
  const std::string path = tempPath("unversioned");
  trace::Envelope e;
  e.mutable_header()->set_format_minor(3);
  e.mutable_header()->set_preset("mlu370-x8");
  std::string body = e.SerializeAsString();
  std::string bytes(trace::kMagic, trace::kMagicSize);
  bytes += static_cast<char>(body.size());
  bytes += body;
  writeAll(path, bytes);
  const std::string err = readError(path);
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find("no trace format version"), std::string::npos) << err;
  std::remove(path.c_str());
}

TEST(TraceFormat, NewerMinorVersionReads) {
  const std::string path = tempPath("minor");
  trace::Envelope e;
  e.mutable_header()->set_format_major(trace::kFormatMajor);
  e.mutable_header()->set_format_minor(trace::kFormatMinor + 5);
  std::string body = e.SerializeAsString();
  std::string bytes(trace::kMagic, trace::kMagicSize);
  bytes += static_cast<char>(body.size());
  bytes += body;
  writeAll(path, bytes);
  trace::TraceReader r(path);   // the header reads; the file is incomplete (no End)
  EXPECT_EQ(r.header().format_minor(), trace::kFormatMinor + 5);
  std::remove(path.c_str());
}

TEST(TraceFormat, ForeignAndEmptyFilesAreNotTraces) {
  const std::string path = tempPath("foreign");
  writeAll(path, "name,value\n1,2\n");
  std::string err = readError(path);
  EXPECT_NE(err.find(path + ": not a cardsim trace"), std::string::npos) << err;
  writeAll(path, "");
  err = readError(path);
  EXPECT_NE(err.find("empty"), std::string::npos) << err;
  err = readError(path + ".missing");
  EXPECT_NE(err.find("cannot open"), std::string::npos) << err;
  std::remove(path.c_str());
}

TEST(TraceFormat, EveryTruncationIsDetected) {
  const std::string good = writeSample("whole", 50);
  const std::string bytes = readAll(good);
  const std::string path = tempPath("cut");
  // Cut at every offset: each shorter file is an error naming the file, never a clean read.
  expectEveryCutDetected(bytes, path);
  // A cut between records says the End record is missing and where the file ends.
  writeAll(path, bytes.substr(0, bytes.size() - 12));
  std::string err = readError(path);
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  std::remove(path.c_str());
  std::remove(good.c_str());
}

TEST(TraceFormat, IncompleteFileWithoutEndIsReported) {
  const std::string path = tempPath("noend");
  {
    trace::TraceWriter w(path, sampleHeader());
    trace::Envelope e;
    e.mutable_alloc()->set_bytes(64);
    w.write(e);
  }   // destroyed without close(): what was buffered is written, without the End record
  const std::string err = readError(path);
  EXPECT_NE(err.find(path + ": incomplete"), std::string::npos) << err;
  EXPECT_NE(err.find("after record #1"), std::string::npos) << err;
  std::remove(path.c_str());
}

TEST(TraceFormat, EveryCorruptedByteIsDetected) {
  const std::string good = writeSample("corrupt", 20);
  const std::string bytes = readAll(good);
  // Where the End record starts: every byte before it is covered by its CRC-32 and counts
  // (the End record's own reason text is not).
  uint64_t end_at = 0;
  {
    trace::TraceReader r(good);
    trace::Envelope e;
    for (end_at = r.offset(); r.next(&e); end_at = r.offset()) {
    }
  }
  ASSERT_GT(end_at, trace::kMagicSize);
  const std::string path = tempPath("flipped");
  for (std::size_t i = 0; i < end_at + 2; ++i) {   // + the End record's length and tag
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    writeAll(path, bad);
    const std::string err = readError(path);
    ASSERT_FALSE(err.empty()) << "byte " << i << " flipped read cleanly";
    EXPECT_EQ(err.rfind(path, 0), 0u) << err;
    const std::string verr = verifyError(path);
    ASSERT_FALSE(verr.empty()) << "byte " << i << " flipped verified cleanly";
    EXPECT_EQ(verr.rfind(path, 0), 0u) << verr;
  }
  // Trailing data after the End record.
  writeAll(path, bytes + std::string("\x02\x08\x01", 3));
  const std::string err = readError(path);
  EXPECT_NE(err.find("after the End record"), std::string::npos) << err;
  EXPECT_NE(verifyError(path).find("after the End record"), std::string::npos) << verifyError(path);
  // ... also bytes that are no record at all (not "the file ends inside a record").
  writeAll(path, bytes + std::string("\xff\xff\xff", 3));
  EXPECT_NE(readError(path).find("corrupt: data after the End record (offset " + std::to_string(bytes.size())),
            std::string::npos)
      << readError(path);
  // The untouched file verifies, with the End record's count.
  trace::TraceReader whole(good), parsed(good);
  whole.verify();
  trace::Envelope e;
  while (parsed.next(&e)) {
  }
  EXPECT_EQ(whole.end().records(), parsed.end().records());
  EXPECT_EQ(whole.end().records(), 1u + 1u + 2u * 20u);   // header, name, kernel + command each
  EXPECT_EQ(whole.offset(), bytes.size());
  std::remove(path.c_str());
  std::remove(good.c_str());
}

TEST(TraceFormat, CorruptLengthPrefixNamesRecordAndOffset) {
  const std::string good = writeSample("length", 3);
  std::string bytes = readAll(good);
  // The header's length prefix sits right after the magic: make it claim far too much.
  const std::string path = tempPath("length_bad");
  std::string bad = bytes.substr(0, trace::kMagicSize) + std::string("\xff\xff\xff\xff\x7f", 5) +
                    bytes.substr(trace::kMagicSize + 1);
  writeAll(path, bad);
  const std::string err = readError(path);
  EXPECT_NE(err.find("record #0 at offset 8"), std::string::npos) << err;
  EXPECT_NE(err.find("corrupt length"), std::string::npos) << err;
  std::remove(path.c_str());
  std::remove(good.c_str());
}

namespace {
trace::Compression gzip(int level = 6) {
  trace::Compression c;
  c.gzip = true;
  c.level = level;
  return c;
}
}  // namespace

TEST(TraceFormat, CompressedTraceIsGzipOfThePlainFileAndReadsTheSame) {
  const int n = 40000;   // several buffer write-outs, each a sync flush of the gzip stream
  const std::string plain = writeSample("plain", n), packed = writeSample("packed", n, gzip());
  const std::string pbytes = readAll(plain), zbytes = readAll(packed);
  ASSERT_GE(zbytes.size(), 2u);
  EXPECT_EQ(static_cast<uint8_t>(zbytes[0]), 0x1f);
  EXPECT_EQ(static_cast<uint8_t>(zbytes[1]), 0x8b);
  EXPECT_LT(zbytes.size() * 2, pbytes.size()) << "compressed " << zbytes.size() << " of " << pbytes.size();
  trace::TraceReader a(plain), b(packed);
  EXPECT_EQ(a.header().SerializeAsString(), b.header().SerializeAsString());
  trace::Envelope ea, eb;
  uint64_t records = 0;
  for (;;) {
    const bool more_a = a.next(&ea), more_b = b.next(&eb);
    ASSERT_EQ(more_a, more_b) << "after " << records << " records";
    if (!more_a) break;
    ASSERT_EQ(ea.SerializeAsString(), eb.SerializeAsString()) << "record " << records;
    ++records;
  }
  EXPECT_EQ(records, 1u + 2u * n);
  EXPECT_EQ(a.end().crc32(), b.end().crc32());   // the CRC is of the plain bytes
  EXPECT_EQ(b.offset(), pbytes.size());           // offsets count decompressed bytes
  trace::TraceReader v(packed);
  v.verify();
  EXPECT_EQ(v.end().records(), a.end().records());
  std::remove(plain.c_str());
  std::remove(packed.c_str());
}

TEST(TraceFormat, EveryTruncationOfACompressedTraceIsDetected) {
  const std::string good = writeSample("zwhole", 50, gzip(1));
  const std::string bytes = readAll(good);
  const std::string path = tempPath("zcut");
  expectEveryCutDetected(bytes, path);
  std::remove(path.c_str());
  std::remove(good.c_str());
}

TEST(TraceFormat, CompressedTraceOfAKilledWriterReadsAsIncomplete) {
  const std::string path = tempPath("znoend");
  {
    trace::TraceWriter w(path, sampleHeader(), gzip());
    trace::Envelope e;
    e.mutable_alloc()->set_bytes(64);
    w.write(e);
    w.flush();   // what a process has written out when it is killed
    const std::string err = readError(path);
    EXPECT_NE(err.find(path + ": incomplete"), std::string::npos) << err;
    EXPECT_NE(err.find("after record #1"), std::string::npos) << err;
  }
  std::remove(path.c_str());
}

// Every record of a trace file, serialized (what a reader gets out of it).
std::vector<std::string> recordBytes(const std::string& path) {
  std::vector<std::string> out;
  trace::TraceReader r(path);
  trace::Envelope e;
  while (r.next(&e)) out.push_back(e.SerializeAsString());
  return out;
}

TEST(TraceFormat, EveryCorruptedByteOfACompressedTraceIsDetected) {
  const std::string good = writeSample("zcorrupt", 20, gzip());
  const std::string bytes = readAll(good);
  const std::string path = tempPath("zflipped");
  const std::vector<std::string> want = recordBytes(good);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    // The gzip header's modification time, extra flags and OS (bytes 4-9) carry no data.
    if (i >= 4 && i <= 9) continue;
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    writeAll(path, bad);
    const std::string err = readError(path);
    // The deflate stream's last byte (before the 8-byte trailer) is padded after its
    // end-of-block code: a flip of padding bits only changes nothing that is read.
    if (err.empty() && i == bytes.size() - 9 && recordBytes(path) == want) continue;
    ASSERT_FALSE(err.empty()) << "byte " << i << " of " << bytes.size() << " flipped read cleanly";
    EXPECT_EQ(err.rfind(path, 0), 0u) << err;
  }
  std::remove(path.c_str());
  std::remove(good.c_str());
}

TEST(TraceFormat, CompressionFromTheEnvironmentNamesABadValue) {
  const auto with = [](const char* v) {
    if (v) ::setenv("CARDSIM_TRACE_COMPRESS", v, 1);
    else ::unsetenv("CARDSIM_TRACE_COMPRESS");
    return trace::compressionFromEnvironment();
  };
  EXPECT_FALSE(with(nullptr).gzip);
  EXPECT_FALSE(with("none").gzip);
  EXPECT_FALSE(with("0").gzip);
  EXPECT_TRUE(with("gzip").gzip);
  EXPECT_EQ(with("gzip").level, 6);
  EXPECT_EQ(with("gzip:9").level, 9);
  EXPECT_TRUE(with("1").gzip);
  for (const char* bad : {"zstd", "gzip:0", "gzip:10", "yes"}) {
    try {
      with(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const trace::TraceError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("\"") + bad + "\""), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("gzip:1 .. gzip:9"), std::string::npos) << e.what();
    }
  }
  ::unsetenv("CARDSIM_TRACE_COMPRESS");
}

TEST(TraceFormat, ImpossibleValuesInWellFormedRecordsAreCorruptNamingTheRecord) {
  // Bytes that parse, under a correct CRC, but say what no recorder writes: every reader
  // would mistime them, so reading stops at the record that says it.
  struct Case {
    const char* what;
    std::function<void(trace::Envelope&)> fill;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Case cases[] = {
      {"ends (5 ps) before it starts (9 ps)", [](trace::Envelope& e) {
         e.mutable_command()->set_start_ps(9);
         e.mutable_command()->set_end_ps(5);
       }},
      {"the kernel's flops", [&](trace::Envelope& e) { e.set_call(1); e.mutable_kernel()->set_flops(nan); }},
      {"the kernel's bytes_read", [](trace::Envelope& e) { e.set_call(1); e.mutable_kernel()->set_bytes_read(-4); }},
      {"the collective's bytes", [](trace::Envelope& e) { e.set_call(1); e.mutable_collective()->set_bytes(-1); }},
      {"the kernel launch uses name id 7, which no earlier Name record defines",
       [](trace::Envelope& e) { e.set_call(1); e.mutable_kernel()->set_name(7); }},
      {"the device command uses name id 3, which no earlier Name record defines",
       [](trace::Envelope& e) { e.mutable_command()->set_name(3); }},
      {"a Name record with id 0", [](trace::Envelope& e) { e.mutable_name()->set_text("gemm"); }},
      {"returns (host 3 ps) before it begins (7 ps)", [](trace::Envelope& e) {
         e.set_call(1);
         e.set_host_begin_ps(7);
         e.set_host_end_ps(3);
         e.mutable_api()->set_api(trace::ApiCall::DEVICE_SYNCHRONIZE);
       }},
  };
  for (const Case& c : cases) {
    const std::string path = tempPath("values");
    {
      trace::TraceWriter w(path, sampleHeader());
      trace::Envelope e;
      c.fill(e);
      w.write(e);
      w.close(trace::End());
    }
    const std::string err = readError(path);
    EXPECT_NE(err.find(path + ": record #1 at offset"), std::string::npos) << err;
    EXPECT_NE(err.find("corrupt: "), std::string::npos) << err;
    EXPECT_NE(err.find(c.what), std::string::npos) << err;
    std::remove(path.c_str());
  }
}

TEST(TraceFormat, ASlowWritersRecordsReachTheFileWithinAboutASecond) {
  // A slow program fills the 1 MiB buffer in minutes: its records are written out at least
  // every second all the same, so that a process killed outright keeps them.
  const std::string path = tempPath("slow");
  trace::TraceWriter w(path, sampleHeader());
  const auto size = [&] {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<long long>(st.st_size) : -1;
  };
  const long long header_only = size();
  trace::Envelope e;
  e.set_call(1);
  e.mutable_kernel()->set_flops(1);
  for (int i = 0; i < 200; ++i) w.write(e);
  EXPECT_EQ(size(), header_only);   // buffered: not a second yet
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  for (int i = 0; i < 256; ++i) w.write(e);   // looked at once among these, a second on
  EXPECT_GT(size(), header_only + 200 * 4);
  w.close(trace::End());
  EXPECT_EQ(readError(path), "");
  std::remove(path.c_str());
}
