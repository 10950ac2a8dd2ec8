#include "traces/export/PerfettoWriter.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace cardsim::timeline {

namespace {

namespace pb = google::protobuf;

// ---- JSON text ------------------------------------------------------------------------

// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629), 0 if there is none.
std::size_t utf8Length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;   // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if (c >= 0xE1 && c <= 0xEC) n = 3;
  else if (c == 0xED) n = 3, hi = 0x9F;   // no surrogates
  else if (c >= 0xEE && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;   // up to U+10FFFF
  else return 0;
  if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

// `s` as a JSON string literal. Names come from the traced program and need not be UTF-8:
// a byte that is not part of a well-formed sequence becomes U+FFFD, so the file stays valid.
void appendString(std::string& out, std::string_view s) {
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8Length(s, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

std::string jsonString(std::string_view s) {
  std::string out;
  appendString(out, s);
  return out;
}

// Shortest text that reads back as `v` (locale-independent); JSON has no NaN or infinity.
std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char b[32];
  const auto r = std::to_chars(b, b + sizeof b, v);
  return std::string(b, r.ptr);
}

// ---- time -------------------------------------------------------------------------------

// Shortest text without an exponent that reads back as `v`.
std::string fixed(double v) {
  char b[400];   // any finite double fits
  const auto r = std::to_chars(b, b + sizeof b, v, std::chars_format::fixed);
  return r.ec == std::errc() ? std::string(b, r.ptr) : number(v);
}

// A time in the file: its text in microseconds, the double a reader parses from it, and the
// nanoseconds Perfetto's importer makes of it (that double times 1000, truncated).
struct Time {
  std::string text;
  double us = 0;
  int64_t ns = 0;
};

int64_t importedNs(double us) { return static_cast<int64_t>(us * 1000.0); }

// Picoseconds as microseconds, exactly ("1.5" for 1,500,000 ps). A whole number of
// nanoseconds can import one nanosecond short (1.001 * 1000 = 1000.99999...), which would
// make back-to-back commands overlap in Perfetto; such a time is written as the next double
// or few up that imports exactly (a few units in the last place: it still reads back as the
// same picosecond).
Time usTime(uint64_t ps) {
  char full[48];
  std::snprintf(full, sizeof full, "%llu.%06llu", static_cast<unsigned long long>(ps / 1000000),
                static_cast<unsigned long long>(ps % 1000000));
  std::string plain = full;
  while (plain.back() == '0') plain.pop_back();
  if (plain.back() == '.') plain.pop_back();
  const int64_t want = static_cast<int64_t>(ps / 1000);
  const double parsed = std::strtod(plain.c_str(), nullptr);
  double v = parsed;
  for (int i = 0; i <= 64; ++i, v = std::nextafter(v, HUGE_VAL))
    if (importedNs(v) == want) return {i == 0 ? plain : fixed(v), v, want};
  return {plain, parsed, importedNs(parsed)};
}

// The duration of a slice from `ts` to `end`, chosen among the doubles within a few units in
// the last place of their difference: one that a reader adding the two doubles (Python,
// JavaScript) takes to end exactly at `end`'s double, so that a slice ending where another
// begins, or where its parent ends, compares equal rather than a rounding error past it; of
// those, one that Perfetto's importer (truncated nanoseconds) also takes to end at `end`'s
// nanosecond, where one exists (a slice shorter than a nanosecond can straddle one).
Time usDuration(const Time& ts, const Time& end) {
  const double a = ts.us, b = end.us;
  double d = b - a, chosen = d;   // a + (b - a) is within an ulp of b: some d near it ends at b
  for (int i = 0; i < 8 && d > 0; ++i) d = std::nextafter(d, 0.0);
  bool ends_at_b = false;
  for (int i = 0; i < 17; ++i, d = std::nextafter(d, HUGE_VAL)) {
    if (a + d != b) continue;
    if (!ends_at_b) chosen = d, ends_at_b = true;
    if (importedNs(d) == end.ns - ts.ns) {
      chosen = d;
      break;
    }
  }
  return {fixed(chosen), chosen, importedNs(chosen)};
}

// ---- record payloads as args -----------------------------------------------------------

bool isAddress(const pb::FieldDescriptor* f) {
  return f->cpp_type() == pb::FieldDescriptor::CPPTYPE_UINT64 &&
         (f->name() == "address" || f->name() == "src" || f->name() == "dst");
}

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "\"0x%llx\"", static_cast<unsigned long long>(v));
  return b;
}

void appendMessage(std::string& out, const pb::Message& m, const std::map<uint32_t, std::string>& names);

// One field's value (element `index` of a repeated field). Addresses are hex strings (a
// double cannot hold every 64-bit value), a kernel's name id is its text.
void appendValue(std::string& out, const pb::Message& m, const pb::FieldDescriptor* f, int index,
                 const std::map<uint32_t, std::string>& names) {
  const pb::Reflection* r = m.GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
      out += std::to_string(rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_INT64:
      out += std::to_string(rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT32: {
      const uint32_t v = rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f);
      auto n = f->name() == "name" && f->containing_type() == trace::KernelLaunch::descriptor() ? names.find(v)
                                                                                                 : names.end();
      out += n != names.end() ? jsonString(n->second) : std::to_string(v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_UINT64: {
      const uint64_t v = rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f);
      out += isAddress(f) ? hex(v) : std::to_string(v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      out += number(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      out += number(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      out += (rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f)) ? "true" : "false";
      break;
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      const int v = rep ? r->GetRepeatedEnumValue(m, f, index) : r->GetEnumValue(m, f);
      const pb::EnumValueDescriptor* d = f->enum_type()->FindValueByNumber(v);
      out += d ? jsonString(d->name()) : std::to_string(v);
      break;
    }
    case pb::FieldDescriptor::CPPTYPE_STRING:
      appendString(out, rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      appendMessage(out, rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f), names);
      break;
  }
}

// Every field of the message in declaration order, defaults included (proto3 leaves a zero
// out of the record, but "kind": "COPY_HOST_TO_DEVICE" is worth showing), after `first`.
void appendFields(std::string& out, const pb::Message& m, const std::map<uint32_t, std::string>& names, bool first) {
  const pb::Descriptor* d = m.GetDescriptor();
  const pb::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (!first) out += ',';
    first = false;
    appendString(out, f->name());
    out += ':';
    if (f->is_map()) {   // none in call payloads; kept valid should one appear
      out += "null";
    } else if (f->is_repeated()) {
      out += '[';
      for (int k = 0; k < r->FieldSize(m, f); ++k) {
        if (k) out += ',';
        appendValue(out, m, f, k, names);
      }
      out += ']';
    } else {
      appendValue(out, m, f, -1, names);
    }
  }
}

void appendMessage(std::string& out, const pb::Message& m, const std::map<uint32_t, std::string>& names) {
  out += '{';
  appendFields(out, m, names, true);
  out += '}';
}

// The payload of a host call's record (the set member of the Envelope's oneof).
const pb::Message* payload(const trace::Envelope& e) {
  const pb::OneofDescriptor* oneof = trace::Envelope::descriptor()->FindOneofByName("record");
  const pb::FieldDescriptor* f = e.GetReflection()->GetOneofFieldDescriptor(e, oneof);
  if (!f || f->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE) return nullptr;
  return &e.GetReflection()->GetMessage(e, f);
}

// ---- events, in the order Perfetto processes them ---------------------------------------
//
// Perfetto's importer sorts events by timestamp (in nanoseconds); at one timestamp complete
// slices of some duration come first, longest first, then everything else in file order. A
// flow event binds to the slice on top of its track's stack when it is processed, so each
// flow event follows its own slice: after the slices of some duration that begin at that
// nanosecond for a slice of some duration, right after it for a slice of none.
struct Order {
  int64_t ns = 0;
  int cls = 0;            // 0: slice of some duration, 1: its flows, 2: the rest; -1: metadata
  int64_t dur_key = 0;    // longest first among class 0 (and 1, to keep their slices' order)
  uint64_t seq = 0;
  uint32_t sub = 0;       // a slice's flow events after it
  uint64_t ps = 0;        // the exact time: within a nanosecond, what begins first comes first
                          // (a host call before the command it submits a picosecond later)
  bool operator<(const Order& o) const {
    return std::tie(ns, ps, cls, dur_key, seq, sub) < std::tie(o.ns, o.ps, o.cls, o.dur_key, o.seq, o.sub);
  }
};

struct Event {
  Order order;
  std::string json;
};

struct TrackKey {
  std::size_t rank;
  int device;           // -1: the rank's host
  uint64_t lane;        // host thread or stream
  int level;            // 0, or an overflow track
  bool operator<(const TrackKey& o) const {
    return std::tie(rank, device, lane, level) < std::tie(o.rank, o.device, o.lane, o.level);
  }
};

struct Slice {
  bool device = false;
  std::size_t index = 0;    // into calls() or commands()
  TrackKey track{};
  uint64_t begin = 0, end = 0;
  Time ts, dur;
  uint64_t seq = 0;
  uint32_t flow_events = 0;

  bool positive() const { return dur.ns > 0; }
  Order order() const { return {ts.ns, positive() ? 0 : 2, positive() ? -dur.ns : 0, seq, 0, begin}; }
  Order flowOrder() { return {ts.ns, positive() ? 1 : 2, positive() ? -dur.ns : 0, seq, ++flow_events, begin}; }
};

struct Track {
  int pid = 0, tid = 0;
  std::string name;
};

// Puts each slice of one lane (host thread or stream) on a level where it is disjoint from
// the others or, where `nesting`, properly inside one: a host call may contain others, a
// device command never overlaps another of its stream unless the model misbehaved.
void assignLevels(std::vector<Slice>& slices, std::vector<std::size_t>& lane, bool nesting) {
  // Device lanes in stream order (a zero-length command before the one that starts at its
  // time); host lanes outermost first.
  std::stable_sort(lane.begin(), lane.end(), [&](std::size_t a, std::size_t b) {
    const Slice &x = slices[a], &y = slices[b];
    if (x.begin != y.begin) return x.begin < y.begin;
    return nesting ? x.end > y.end : x.end < y.end;
  });
  std::vector<std::vector<uint64_t>> open;   // per level: ends of the enclosing slices
  for (std::size_t i : lane) {
    Slice& s = slices[i];
    std::size_t level = 0;
    for (;; ++level) {
      if (level == open.size()) open.emplace_back();
      std::vector<uint64_t>& stack = open[level];
      while (!stack.empty() && stack.back() <= s.begin) stack.pop_back();
      if (stack.empty() || (nesting && s.end <= stack.back())) break;
    }
    open[level].push_back(s.end);
    s.track.level = static_cast<int>(level);
  }
}

}  // namespace

PerfettoWriter::Summary PerfettoWriter::write(std::ostream& out) const {
  Summary sum;
  const std::vector<RunTimeline::Rank>& ranks = run_.ranks();

  // Slices: host calls, then device commands.
  std::vector<Slice> slices;
  // The runtime's own event markers (RunTimeline's runtime_marker: their records; a wait on
  // one is the program's) are not shown: not the program's, they cost it no time (and, at the instant of the work after them, would take
  // that work's arrows in Perfetto, which binds an arrow to the slice on top of its track).
  constexpr std::size_t kNoSlice = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> call_slice(run_.calls().size(), kNoSlice), command_slice(run_.commands().size(), kNoSlice);
  for (std::size_t i = 0; i < run_.calls().size(); ++i) {
    const RunTimeline::HostCall& c = run_.calls()[i];
    if (c.runtime_marker) continue;
    Slice s;
    s.index = i;
    s.track = {c.rank, -1, c.record.thread(), 0};
    s.begin = c.record.host_begin_ps();
    s.end = std::max(s.begin, c.record.host_end_ps());
    call_slice[i] = slices.size();
    slices.push_back(std::move(s));
  }
  for (std::size_t i = 0; i < run_.commands().size(); ++i) {
    const RunTimeline::Command& c = run_.commands()[i];
    if (c.runtime_marker && c.command.kind() == trace::DeviceCommand::EVENT_RECORD) continue;
    Slice s;
    s.device = true;
    s.index = i;
    s.track = {c.rank, c.command.device(), c.command.stream(), 0};
    s.begin = c.command.start_ps();
    s.end = std::max(s.begin, c.command.end_ps());
    command_slice[i] = slices.size();
    slices.push_back(std::move(s));
  }
  std::map<TrackKey, std::vector<std::size_t>> lanes;
  for (std::size_t i = 0; i < slices.size(); ++i) lanes[slices[i].track].push_back(i);
  uint64_t seq = 0;
  for (auto& [key, lane] : lanes) {
    assignLevels(slices, lane, key.device < 0);
    for (std::size_t i : lane) slices[i].seq = seq++;
  }
  for (Slice& s : slices) {
    s.ts = usTime(s.begin);
    s.dur = usDuration(s.ts, usTime(s.end));
  }

  // Processes: per rank its host, then its cards; tracks numbered after every process so
  // that no thread id is also a process id (Perfetto keys thread names by thread id).
  std::map<std::pair<std::size_t, int>, int> pids;   // (rank, device or -1)
  std::vector<std::set<int>> devices(ranks.size());
  for (const RunTimeline::Command& c : run_.commands()) devices[c.rank].insert(c.command.device());
  for (const RunTimeline::MemorySample& m : run_.memory())
    if (m.device >= 0) devices[m.rank].insert(m.device);
  int next_pid = 1;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    pids[{r, -1}] = next_pid++;
    for (int d : devices[r]) pids[{r, d}] = next_pid++;
  }
  std::map<TrackKey, Track> tracks;
  for (const Slice& s : slices) tracks.emplace(s.track, Track{});
  int next_tid = next_pid;
  for (auto& [key, t] : tracks) {
    t.pid = pids.at({key.rank, key.device});
    t.tid = next_tid++;
    t.name = key.device < 0 ? "host thread " + std::to_string(key.lane) : "stream " + std::to_string(key.lane);
    if (key.level > 0) {
      t.name += " · overlap " + std::to_string(key.level);
      ++sum.overflow_tracks;
    }
  }
  sum.tracks = tracks.size();

  std::vector<Event> events;
  uint64_t meta = 0;
  auto metadata = [&](const char* what, int pid, int tid, const std::string& args) {
    events.push_back({Order{std::numeric_limits<int64_t>::min(), -1, 0, meta++, 0},
                      std::string("{\"ph\":\"M\",\"name\":\"") + what + "\",\"pid\":" + std::to_string(pid) +
                          ",\"tid\":" + std::to_string(tid) + ",\"ts\":0,\"args\":" + args + "}"});
  };
  for (const auto& [key, pid] : pids) {
    const RunTimeline::Rank& rank = ranks[key.first];
    std::string name = "rank " + std::to_string(rank.rank) + " · ";
    if (key.second < 0) {
      name += "host";
    } else {
      const std::string& card = rank.header.device_name();
      name += (card.empty() ? std::string("card") : card) + " #" + std::to_string(key.second);
    }
    metadata("process_name", pid, pid, "{\"name\":" + jsonString(name) + "}");
    metadata("process_sort_index", pid, pid, "{\"sort_index\":" + std::to_string(pid) + "}");
  }
  for (const auto& [key, t] : tracks) {
    metadata("thread_name", t.pid, t.tid, "{\"name\":" + jsonString(t.name) + "}");
    metadata("thread_sort_index", t.pid, t.tid, "{\"sort_index\":" + std::to_string(t.tid) + "}");
  }

  // Complete slices.
  for (const Slice& s : slices) {
    const Track& t = tracks.at(s.track);
    std::string j = "{\"ph\":\"X\",\"pid\":" + std::to_string(t.pid) + ",\"tid\":" + std::to_string(t.tid) +
                    ",\"ts\":" + s.ts.text + ",\"dur\":" + s.dur.text + ",\"name\":";
    if (s.device) {
      const RunTimeline::Command& c = run_.commands()[s.index];
      const trace::DeviceCommand& d = c.command;
      appendString(j, c.name);
      j += ",\"cat\":\"device\",\"args\":{\"kind\":" + jsonString(trace::DeviceCommand::Kind_Name(d.kind())) +
           ",\"call\":" + std::to_string(c.call != RunTimeline::kNone ? run_.calls()[c.call].record.call() : 0) +
           ",\"flops\":" + number(d.flops()) +
           ",\"bytes\":" + std::to_string(d.bytes()) + ",\"rank\":" + std::to_string(ranks[c.rank].rank) +
           ",\"device\":" + std::to_string(d.device()) + ",\"stream\":" + std::to_string(d.stream()) +
           ",\"queue\":" + std::to_string(d.queue()) + ",\"ready_us\":" + usTime(d.ready_ps()).text;
      if (c.call != RunTimeline::kNone && run_.calls()[c.call].record.call() != d.call())
        j += ",\"recorded_call\":" + std::to_string(d.call());   // a collective paired by order
      if (c.event) j += ",\"event\":" + std::to_string(c.event);
      if (d.kind() == trace::DeviceCommand::COLLECTIVE && c.call != RunTimeline::kNone) {
        // The command carries no bytes of its own; the call says what was reduced or sent.
        const trace::Collective& col = run_.calls()[c.call].record.collective();
        j += ",\"group\":" + jsonString(c.group) + ",\"group_seq\":" + std::to_string(c.group_seq) +
             ",\"collective_bytes\":" + number(col.bytes()) + ",\"algorithm\":" + jsonString(col.algorithm_used());
      }
      j += "}}";
      ++sum.device_slices;
    } else {
      const RunTimeline::HostCall& c = run_.calls()[s.index];
      const trace::Envelope& e = c.record;
      appendString(j, c.name);
      j += ",\"cat\":\"host\",\"args\":{\"call\":" + std::to_string(e.call()) +
           ",\"thread\":" + std::to_string(e.thread()) + ",\"status\":" + std::to_string(e.status()) +
           ",\"device\":" + std::to_string(e.device());
      if (const pb::Message* p = payload(e)) appendFields(j, *p, ranks[c.rank].names, false);
      j += "}}";
      ++sum.host_slices;
    }
    events.push_back({s.order(), std::move(j)});
  }

  // Flows: the start on the slice Perfetto processes first (it drops a finish that comes
  // before its start, and draws every arrow forward in time anyway), the finish on the other.
  uint64_t flow_id = 0;
  auto flow = [&](std::size_t a, std::size_t b, const char* cat) {
    if (a == kNoSlice || b == kNoSlice) return;
    if (slices[b].order() < slices[a].order()) std::swap(a, b);
    const uint64_t id = ++flow_id;
    for (std::size_t k : {a, b}) {
      Slice& s = slices[k];
      const Track& t = tracks.at(s.track);
      std::string j = std::string("{\"ph\":\"") + (k == a ? "s" : "f") + "\",\"id\":" + std::to_string(id) +
                      ",\"pid\":" + std::to_string(t.pid) + ",\"tid\":" + std::to_string(t.tid) + ",\"ts\":" +
                      s.ts.text + ",\"cat\":\"" + cat + "\",\"name\":\"" + cat + "\"" + (k == a ? "" : ",\"bp\":\"e\"") +
                      "}";
      events.push_back({s.flowOrder(), std::move(j)});
    }
    ++sum.flows;
  };
  for (std::size_t i = 0; i < run_.commands().size(); ++i)
    if (run_.commands()[i].call != RunTimeline::kNone) flow(call_slice[run_.commands()[i].call], command_slice[i], "submit");
  for (const RunTimeline::Dependency& d : run_.dependencies())
    flow(command_slice[d.from], command_slice[d.to],
         d.kind == RunTimeline::DependencyKind::kEventWait ? "event" : "collective");

  // Memory counters.
  for (const RunTimeline::MemorySample& m : run_.memory()) {
    const int pid = pids.at({m.rank, m.device});
    const char* name = m.kind == trace::MEMORY_DEVICE      ? "device memory"
                       : m.kind == trace::MEMORY_HOST_PINNED ? "pinned host memory"
                                                             : "registered host memory";
    const Time ts = usTime(m.ps);
    events.push_back({Order{ts.ns, 2, 0, seq++, 0, m.ps},
                      "{\"ph\":\"C\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(pid) +
                          ",\"ts\":" + ts.text + ",\"name\":\"" + name + "\",\"args\":{\"bytes_in_use\":" +
                          std::to_string(m.bytes) + "}}"});
    ++sum.memory_samples;
  }

  // Link counters, in a process of their own: at each boundary of a load the sum of the
  // loads over it.
  if (!links_.empty()) {
    const int fabric_pid = next_tid++;
    metadata("process_name", fabric_pid, fabric_pid, "{\"name\":\"fabric links\"}");
    metadata("process_sort_index", fabric_pid, fabric_pid, "{\"sort_index\":" + std::to_string(fabric_pid) + "}");
    for (const auto& [name, loads] : links_) {
      std::map<uint64_t, double> delta;
      for (const LinkLoad& l : loads) {
        if (l.end_ps <= l.begin_ps) continue;
        delta[l.begin_ps] += l.utilization;
        delta[l.end_ps] -= l.utilization;
      }
      if (delta.empty()) continue;
      ++sum.link_counters;
      double level = 0;
      for (const auto& [ps, d] : delta) {
        level += d;
        if (level < 1e-12) level = 0;   // what the additions leave of a return to idle
        const Time ts = usTime(ps);
        char value[32];
        std::snprintf(value, sizeof value, "%.6f", level);
        events.push_back({Order{ts.ns, 2, 0, seq++, 0, ps},
                          "{\"ph\":\"C\",\"pid\":" + std::to_string(fabric_pid) + ",\"tid\":" +
                              std::to_string(fabric_pid) + ",\"ts\":" + ts.text + ",\"name\":" +
                              jsonString("link " + name) + ",\"args\":{\"utilization\":" + value + "}}"});
        ++sum.link_samples;
      }
    }
  }

  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.order < b.order; });

  // The document: what the run was, then the events one per line.
  const trace::Header& h0 = ranks.front().header;
  std::string head = "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"exporter\":\"cardsim export\",\"cardsim_version\":" +
                     jsonString(h0.cardsim_version()) + ",\"preset\":" + jsonString(h0.preset()) +
                     ",\"device_name\":" + jsonString(h0.device_name()) + ",\"execution_mode\":" +
                     jsonString(h0.execution_mode()) + ",\"world_size\":" + std::to_string(h0.world_size()) +
                     ",\"ranks\":[";
  for (std::size_t r = 0; r < ranks.size(); ++r) head += (r ? "," : "") + std::to_string(ranks[r].rank);
  head += "],\"trace_format\":\"" + std::to_string(h0.format_major()) + "." + std::to_string(h0.format_minor()) +
          "\"},\"traceEvents\":[\n";
  out << head;
  for (std::size_t i = 0; i < events.size(); ++i) {
    out << events[i].json;
    out << (i + 1 < events.size() ? ",\n" : "\n");
  }
  out << "]}\n";
  return sum;
}

}  // namespace cardsim::timeline
