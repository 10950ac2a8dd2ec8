#include "simulator/Config.h"

#include <strings.h>
#include <sys/stat.h>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/reflection.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "simulator/EmbeddedPresets.h"
#include "simulator/Units.h"
#include "simulator/proto/config.pb.h"

namespace cardsim::sim {

using namespace cardsim::model;

namespace {

namespace pb = google::protobuf;

struct ParseProblem {
  int line = -1;  // 0-based
  int column = -1;
  std::string message;
};

class CollectFirstError : public pb::io::ErrorCollector {
 public:
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (first.line < 0) first = {line, column, message};
  }
  void AddWarning(int, pb::io::ColumnNumber, const std::string&) override {}
  ParseProblem first;
};

// Rebuilds the key path ("device.memory.bandwidht") of the token at or just before
// (line, column) by walking the text format's tokens and tracking open message blocks.
std::string keyPathAt(const std::string& text, int line, int column) {
  pb::io::ArrayInputStream input(text.data(), static_cast<int>(text.size()));
  CollectFirstError ignore;
  pb::io::Tokenizer tokenizer(&input, &ignore);
  tokenizer.set_comment_style(pb::io::Tokenizer::SH_COMMENT_STYLE);
  std::vector<std::string> stack;
  std::string key;              // the key the last token belongs to
  std::string last_identifier;
  bool after_colon = false;     // the next token is a value, not a key
  while (tokenizer.Next()) {
    const auto& tok = tokenizer.current();
    // Protobuf points at the offending key itself, or just past an offending value.
    const bool at = tok.line == line && tok.column == column;
    if (tok.line > line || (tok.line == line && tok.column > column) ||
        (at && tok.type == pb::io::Tokenizer::TYPE_SYMBOL))
      break;
    if (tok.type == pb::io::Tokenizer::TYPE_IDENTIFIER && !after_colon) {
      key = tok.text;
      last_identifier = tok.text;
    }
    after_colon = tok.type == pb::io::Tokenizer::TYPE_SYMBOL && tok.text == ":";
    if (tok.type == pb::io::Tokenizer::TYPE_SYMBOL) {
      if (tok.text == "{" || tok.text == "<") {
        stack.push_back(last_identifier);
        key.clear();
      }
      if ((tok.text == "}" || tok.text == ">") && !stack.empty()) {
        stack.pop_back();
        key.clear();
      }
    }
  }
  std::string path;
  for (const auto& s : stack) path += (path.empty() ? "" : ".") + s;
  if (!key.empty()) path += (path.empty() ? "" : ".") + key;
  return path;
}

std::string readFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw ConfigError(path + ": is a directory, not a configuration file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open file: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw ConfigError(path + ": cannot read file: " + std::strerror(errno));
  return ss.str();
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string fieldNames(const pb::Descriptor* d) {
  std::string out;
  for (int i = 0; i < d->field_count(); ++i) out += (i ? ", " : "") + d->field(i)->name();
  return out;
}

bool isQuantity(const pb::FieldDescriptor* f) {
  return f->type() == pb::FieldDescriptor::TYPE_MESSAGE &&
         f->message_type() == config::Quantity::descriptor();
}

constexpr const char* kTileCyclesPath = "device.compute.tile_cycles";

// compute.tile_cycles when the configuration does not give it: compute.tile_bytes through
// one cluster's port (memory.cluster_bandwidth; without one, the card's bandwidth over its
// clusters) in cycles of compute.clock. 0 where those do not parse (their own errors say why).
double derivedTileCycles(const config::DeviceConfig& dev) {
  std::string why;
  const auto tile = parseQuantity(dev.compute().tile_bytes().value(), Dimension::Bytes, &why);
  const auto clock = parseQuantity(dev.compute().clock().value(), Dimension::Frequency, &why);
  auto port = parseQuantity(dev.memory().cluster_bandwidth().value(), Dimension::Bandwidth, &why);
  if (!port || *port <= 0) {
    const auto bw = parseQuantity(dev.memory().bandwidth().value(), Dimension::Bandwidth, &why);
    const auto clusters = parseQuantity(dev.compute().clusters().value(), Dimension::Count, &why);
    if (bw && clusters && *clusters >= 1) port = *bw / *clusters;
  }
  if (!tile || !clock || !port || *tile <= 0 || *clock <= 0 || *port <= 0) return 0;
  return *tile / *port * *clock;
}

// Checks that every quantity under `msg` is present, has a value, a confidence and (when
// published or derived) a source. Appends one line per problem.
void checkQuantities(const pb::Message& msg, const std::string& prefix,
                     std::vector<std::string>* problems) {
  const pb::Descriptor* d = msg.GetDescriptor();
  const pb::Reflection* r = msg.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->type() != pb::FieldDescriptor::TYPE_MESSAGE || f->is_repeated()) continue;
    const std::string path = prefix + f->name();
    // The fabric has its own rules (only what its shape uses): simulator/FabricConfig.
    if (path == "device.fabric") continue;
    if (isQuantity(f)) {
      if (!r->HasField(msg, f)) {
        if (path == kTileCyclesPath) continue;   // optional: derived (derivedTileCycles)
        problems->push_back(path + ": missing");
        continue;
      }
      const auto& q = static_cast<const config::Quantity&>(r->GetMessage(msg, f));
      if (trim(q.value()).empty()) problems->push_back(path + ".value: missing");
      if (q.confidence() == config::CONFIDENCE_UNSET)
        problems->push_back(path + ".confidence: missing (PUBLISHED, DERIVED or ASSUMED)");
      if ((q.confidence() == config::PUBLISHED || q.confidence() == config::DERIVED) &&
          trim(q.source()).empty())
        problems->push_back(path + ".source: missing for a " +
                            config::Confidence_Name(q.confidence()) + " number");
    } else {
      checkQuantities(r->GetMessage(msg, f), path + ".", problems);
    }
  }
}

class Extractor {
 public:
  Extractor(const config::DeviceConfig& dev, std::string origin)
      : dev_(dev), origin_(std::move(origin)) {}

  // Looks up `path` (relative to the device) and parses it as `dim`.
  double get(const std::string& path, Dimension dim) {
    const config::Quantity* q = find(path);
    if (!q) return 0;  // reported by checkQuantities
    std::string why;
    auto v = parseQuantity(q->value(), dim, &why);
    if (!v) {
      problems_.push_back("device." + path + ": " + why + " (expected a " + dimensionName(dim) +
                          " like " + dimensionExample(dim) + ")" + provenance(*q));
      return 0;
    }
    return *v;
  }
  double positive(const std::string& path, Dimension dim) {
    double v = get(path, dim);
    const config::Quantity* q = find(path);
    if (q && v <= 0 && problemsFor(path) == 0)
      problems_.push_back("device." + path + ": \"" + q->value() + "\" must be greater than 0" +
                          provenance(*q));
    return v;
  }
  // A whole number in [min_value, max_value].
  long long integer(const std::string& path, long long min_value, long long max_value) {
    double v = get(path, Dimension::Count);
    const config::Quantity* q = find(path);
    if (q && problemsFor(path) == 0 &&
        (v < static_cast<double>(min_value) || v > static_cast<double>(max_value))) {
      problems_.push_back("device." + path + ": \"" + q->value() + "\" must be between " +
                          std::to_string(min_value) + " and " + std::to_string(max_value) +
                          provenance(*q));
      return min_value;
    }
    return static_cast<long long>(v);
  }
  uint32_t count(const std::string& path, uint32_t min_value) {
    return static_cast<uint32_t>(integer(path, min_value, 1000000000));
  }
  int signedInt(const std::string& path) {
    return static_cast<int>(integer(path, -1000000, 1000000));
  }
  void fail(const std::string& path, const std::string& msg) {
    const config::Quantity* q = find(path);
    problems_.push_back("device." + path + ": " + msg + (q ? provenance(*q) : ""));
  }
  const std::vector<std::string>& problems() const { return problems_; }
  std::vector<std::string>& problems() { return problems_; }
  // Present and parsed without a problem.
  bool ok(const std::string& path) const { return find(path) != nullptr && problemsFor(path) == 0; }
  // The value as written, quoted, for messages.
  std::string quoted(const std::string& path) const {
    const config::Quantity* q = find(path);
    return q ? "\"" + q->value() + "\"" : "(missing)";
  }

 private:
  static std::string provenance(const config::Quantity& q) { return overrideNote(q); }
  size_t problemsFor(const std::string& path) const {
    return static_cast<size_t>(std::count_if(problems_.begin(), problems_.end(), [&](auto& p) {
      return p.rfind("device." + path + ":", 0) == 0;
    }));
  }
  const config::Quantity* find(const std::string& path) const {
    const pb::Message* msg = &dev_;
    std::stringstream ss(path);
    std::string seg;
    std::vector<std::string> segs;
    while (std::getline(ss, seg, '.')) segs.push_back(seg);
    for (size_t i = 0; i < segs.size(); ++i) {
      const pb::FieldDescriptor* f = msg->GetDescriptor()->FindFieldByName(segs[i]);
      if (!f || f->type() != pb::FieldDescriptor::TYPE_MESSAGE) return nullptr;
      if (!msg->GetReflection()->HasField(*msg, f)) return nullptr;
      msg = &msg->GetReflection()->GetMessage(*msg, f);
    }
    return dynamic_cast<const config::Quantity*>(msg);
  }

  const config::DeviceConfig& dev_;
  std::string origin_;
  std::vector<std::string> problems_;
};

// Preset names in any case (`H100-SXM`), as collective algorithm and op names are.
const EmbeddedPreset* findEmbedded(const std::string& name) {
  for (size_t i = 0; i < kEmbeddedPresetCount; ++i)
    if (strcasecmp(name.c_str(), kEmbeddedPresets[i].name) == 0) return &kEmbeddedPresets[i];
  return nullptr;
}

}  // namespace

SimOptions SimOptions::fromEnvironment(const SimOptions& defaults) {
  SimOptions o = defaults;
  if (const char* p = std::getenv("CARDSIM_PRESET"); p && *p) o.preset = p;
  if (const char* d = std::getenv("CARDSIM_DEVICES"); d && *d) {
    char* end = nullptr;
    long n = std::strtol(d, &end, 10);
    if (*end != '\0' || n < 1 || n > 4096)
      throw ConfigError(std::string("CARDSIM_DEVICES=\"") + d +
                        "\" is not a device count between 1 and 4096");
    o.devices = static_cast<uint32_t>(n);
  }
  if (const char* c = std::getenv("CARDSIM_CONFIG"); c && *c) o.overrides_file = c;
  return o;
}

std::vector<std::string> presetNames() {
  std::vector<std::string> names;
  for (size_t i = 0; i < kEmbeddedPresetCount; ++i) names.emplace_back(kEmbeddedPresets[i].name);
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

// Texts parsed before, with what they parsed to. A process parses the same preset several
// times (the simulator's device and fabric parameters, a replay's analysis of the recorded
// configuration), and a replay's rank processes, forked after the parent parsed it, find it
// here: the text format costs most of a millisecond per parse. Only successful parses are
// kept (a failing text throws again, naming its origin).
class ParsedPresets {
 public:
  bool find(const std::string& text, config::Preset* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [t, p] : entries_)
      if (t == text) {
        *out = p;
        return true;
      }
    return false;
  }
  void add(const std::string& text, const config::Preset& preset) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (entries_.size() >= kMax) entries_.erase(entries_.begin());
    entries_.emplace_back(text, preset);
  }

 private:
  static constexpr std::size_t kMax = 8;
  std::mutex mutex_;
  std::vector<std::pair<std::string, config::Preset>> entries_;
};

ParsedPresets& parsedPresets() {
  static auto* cache = new ParsedPresets;   // never destroyed: usable from exit handlers
  return *cache;
}

}  // namespace

config::Preset parsePresetText(const std::string& text, const std::string& origin) {
  config::Preset preset;
  if (parsedPresets().find(text, &preset)) return preset;
  pb::TextFormat::Parser parser;
  CollectFirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &preset)) {
    const ParseProblem& p = errors.first;
    std::string where = origin + ":" + std::to_string(p.line + 1) + ":" + std::to_string(p.column + 1);
    std::string key = keyPathAt(text, p.line, p.column);
    std::string msg = where + ": " + (key.empty() ? "" : "key '" + key + "': ") + p.message;
    // Name the valid keys for an unknown field: protobuf's message does not.
    if (p.message.find("has no field named") != std::string::npos) {
      const pb::Descriptor* d = config::Preset::descriptor();
      std::stringstream ss(key);
      std::string seg;
      std::vector<std::string> segs;
      while (std::getline(ss, seg, '.')) segs.push_back(seg);
      for (size_t i = 0; i + 1 < segs.size() && d; ++i) {
        const pb::FieldDescriptor* f = d->FindFieldByName(segs[i]);
        d = (f && f->type() == pb::FieldDescriptor::TYPE_MESSAGE) ? f->message_type() : nullptr;
      }
      if (d) msg += " (valid keys here: " + fieldNames(d) + ")";
    }
    throw ConfigError(msg);
  }
  parsedPresets().add(text, preset);
  return preset;
}

config::Preset loadPreset(const std::string& name_or_path) {
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 10 &&
                        name_or_path.rfind(".textproto") == name_or_path.size() - 10);
  if (is_path) {
    config::Preset p = parsePresetText(readFile(name_or_path), name_or_path);
    if (p.name().empty()) p.set_name(name_or_path);
    return p;
  }
  const EmbeddedPreset* e = findEmbedded(name_or_path);
  if (!e) {
    std::string valid;
    for (const auto& n : presetNames()) valid += (valid.empty() ? "" : ", ") + n;
    throw ConfigError("unknown preset \"" + name_or_path + "\" (valid presets: " + valid +
                      "; or a path to a .textproto file)");
  }
  // Parsed once per process (a process forked after loading one keeps it): the text format
  // parser takes about a millisecond per preset, and a replay's ranks each load the job's.
  static std::mutex mutex;
  static std::map<std::string, config::Preset>* parsed = new std::map<std::string, config::Preset>;   // never destroyed
  std::lock_guard<std::mutex> lock(mutex);
  auto it = parsed->find(e->name);
  if (it == parsed->end())
    it = parsed->emplace(e->name, parsePresetText(e->text, std::string("preset ") + e->name)).first;
  return it->second;
}

std::string overrideKey(const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos) return "";
  std::string key = trim(assignment.substr(0, eq));
  if (key.rfind("device.", 0) == 0) key.erase(0, 7);
  return key;
}

void applyOverride(config::Preset& preset, const std::string& assignment,
                   const std::string& origin) {
  // A kernel's decomposition is fixed before any what-if: the derived tile_cycles is pinned
  // from the configuration as it stands, so more bandwidth or another clock leaves it be.
  if (preset.has_device() && !preset.device().compute().has_tile_cycles()) {
    if (const double cycles = derivedTileCycles(preset.device()); cycles > 0) {
      char text[64];
      const auto r = std::to_chars(text, text + sizeof text, cycles);
      config::Quantity* q = preset.mutable_device()->mutable_compute()->mutable_tile_cycles();
      q->set_value(std::string(text, r.ptr) + " cycles");
      q->set_confidence(config::DERIVED);
      q->set_source("compute.tile_bytes / memory.cluster_bandwidth x compute.clock, before overrides");
    }
  }
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos)
    throw ConfigError(origin + ": \"" + assignment + "\" is not of the form key.path=value");
  const std::string key = trim(assignment.substr(0, eq));
  const std::string value = trim(assignment.substr(eq + 1));
  if (key.empty()) throw ConfigError(origin + ": \"" + assignment + "\" has no key");
  if (value.empty()) throw ConfigError(origin + ": key '" + key + "' has no value");
  if (key.front() == '.' || key.back() == '.' || key.find("..") != std::string::npos)
    throw ConfigError(origin + ": key '" + key + "' has an empty segment (a stray '.')");

  pb::Message* msg = preset.mutable_device();
  std::stringstream ss(key);
  std::string seg, walked;
  std::vector<std::string> segs;
  while (std::getline(ss, seg, '.')) segs.push_back(seg);
  // Keys are under the device ("memory.bandwidth"); its full path ("device.memory.bandwidth",
  // as errors name keys) is the same key.
  if (segs.size() > 1 && segs[0] == "device" && !preset.device().GetDescriptor()->FindFieldByName("device"))
    segs.erase(segs.begin());
  for (size_t i = 0; i < segs.size(); ++i) {
    const pb::Descriptor* d = msg->GetDescriptor();
    const pb::FieldDescriptor* f = d->FindFieldByName(segs[i]);
    const std::string here = walked.empty() ? "top level" : "'" + walked + "'";
    walked += (walked.empty() ? "" : ".") + segs[i];
    if (!f || f->is_repeated())
      throw ConfigError(origin + ": unknown key '" + key + "' ('" + segs[i] + "' is not a key under " +
                        here + "; valid: " + fieldNames(d) + ")");
    const bool last = i + 1 == segs.size();
    if (isQuantity(f)) {
      if (!last)
        throw ConfigError(origin + ": unknown key '" + key + "' ('" + walked +
                          "' is a number, it has no sub-keys)");
      auto* q = static_cast<config::Quantity*>(msg->GetReflection()->MutableMessage(msg, f));
      q->set_value(value);
      q->set_confidence(config::OVERRIDDEN);
      q->set_source(origin.rfind("override", 0) == 0 ? origin : "override from " + origin);
      return;
    }
    if (f->type() != pb::FieldDescriptor::TYPE_MESSAGE && !last)
      throw ConfigError(origin + ": unknown key '" + key + "' ('" + walked +
                        "' is a value, it has no sub-keys)");
    if (f->type() == pb::FieldDescriptor::TYPE_STRING && last) {
      msg->GetReflection()->SetString(msg, f, value);
      return;
    }
    if (f->type() == pb::FieldDescriptor::TYPE_BOOL && last) {
      if (value != "true" && value != "false")
        throw ConfigError(origin + ": key '" + key + "' wants true or false, got \"" + value + "\"");
      msg->GetReflection()->SetBool(msg, f, value == "true");
      return;
    }
    if (f->type() != pb::FieldDescriptor::TYPE_MESSAGE || last)
      throw ConfigError(origin + ": key '" + key + "' names a group, not a value (keys under '" +
                        walked + "': " +
                        (f->type() == pb::FieldDescriptor::TYPE_MESSAGE ? fieldNames(f->message_type()) : "") +
                        ")");
    msg = msg->GetReflection()->MutableMessage(msg, f);
  }
}

void applyOverridesFile(config::Preset& preset, const std::string& path) {
  std::istringstream in(readFile(path));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    if (trim(line).empty()) continue;
    applyOverride(preset, line, path + ":" + std::to_string(n));
  }
}

DeviceParams toDeviceParams(const config::Preset& preset, const std::string& origin) {
  const config::DeviceConfig& dev = preset.device();
  std::vector<std::string> problems;
  if (!preset.has_device()) problems.push_back("device: missing");
  if (dev.name().empty()) problems.push_back("device.name: missing");
  checkQuantities(dev, "device.", &problems);

  Extractor x(dev, origin);
  DeviceParams p;
  p.preset = preset.name().empty() ? origin : preset.name();
  p.name = dev.name();
  p.vendor = dev.vendor();

  auto& c = p.compute;
  c.clusters = x.count("compute.clusters", 1);
  c.cores_per_cluster = x.count("compute.cores_per_cluster", 1);
  c.clock_hz = x.positive("compute.clock", Dimension::Frequency);
  const char* dtype_keys[] = {"fp64", "fp32", "tf32", "fp16", "bf16", "int8"};
  for (size_t i = 0; i < kDTypeCount; ++i)
    c.peak_ops_per_s[i] = x.get(std::string("compute.peak.") + dtype_keys[i], Dimension::Throughput);
  if (c.peak_ops_per_s[static_cast<size_t>(DType::FP32)] <= 0)
    x.fail("compute.peak.fp32", "every device needs an fp32 peak above 0");
  // Vector units: a supported type has both figures (elementwise work in it must run
  // somewhere), and GEMMs never do worse on the matrix units than on the vector units.
  for (DType t : {DType::FP64, DType::FP32, DType::FP16, DType::BF16}) {
    const size_t i = static_cast<size_t>(t);
    const std::string key = std::string("compute.vector_peak.") + dtype_keys[i];
    c.vector_peak_ops_per_s[i] = x.get(key, Dimension::Throughput);
    const std::string matrix_key = std::string("compute.peak.") + dtype_keys[i];
    if (!x.ok(key) || !x.ok(matrix_key)) continue;
    const double vec = c.vector_peak_ops_per_s[i], mat = c.peak_ops_per_s[i];
    if ((vec > 0) != (mat > 0))
      x.fail(key, x.quoted(key) + " must be above 0 exactly where " + matrix_key + " (" +
                      x.quoted(matrix_key) + ") is: a type without units has neither");
    else if (vec > mat)
      x.fail(key, x.quoted(key) + " exceeds " + matrix_key + " (" + x.quoted(matrix_key) +
                      "): GEMMs would run faster on the vector units; give the matrix figure "
                      "at least the vector one");
  }
  const char* class_keys[] = {"gemm", "elementwise", "reduction", "other"};
  for (size_t i = 0; i < kKernelClassCount; ++i)
    c.efficiency[i] = x.get(std::string("compute.efficiency.") + class_keys[i], Dimension::Fraction);
  c.dispatch_latency_s = x.get("compute.dispatch_latency", Dimension::Time);
  c.graph_dispatch_latency_s = x.get("compute.graph_dispatch_latency", Dimension::Time);
  c.wave_overhead_cycles = x.get("compute.wave_overhead", Dimension::Cycles);
  c.tile_bytes = x.positive("compute.tile_bytes", Dimension::Bytes);
  c.tile_cycles = dev.compute().has_tile_cycles() ? x.positive("compute.tile_cycles", Dimension::Cycles)
                                                  : derivedTileCycles(dev);

  auto& m = p.memory;
  m.capacity_bytes = static_cast<uint64_t>(x.positive("memory.capacity", Dimension::Bytes));
  m.bandwidth_bytes_per_s = x.positive("memory.bandwidth", Dimension::Bandwidth);
  m.latency_s = x.get("memory.latency", Dimension::Time);
  m.cluster_bandwidth_bytes_per_s = x.positive("memory.cluster_bandwidth", Dimension::Bandwidth);
  m.channels = x.count("memory.channels", 1);
  m.technology = dev.memory().technology();

  auto& h = p.host_link;
  h.pcie_generation = x.count("host_link.pcie_generation", 1);
  h.lanes = x.count("host_link.lanes", 1);
  h.efficiency = x.get("host_link.efficiency", Dimension::Fraction);
  h.latency_s = x.get("host_link.latency", Dimension::Time);
  h.pageable_efficiency = x.get("host_link.pageable_efficiency", Dimension::Fraction);
  if (h.pcie_generation > 6) x.fail("host_link.pcie_generation", "PCIe generations 1 to 6 are known");
  if (h.lanes != 1 && h.lanes != 2 && h.lanes != 4 && h.lanes != 8 && h.lanes != 16 && h.lanes != 32)
    x.fail("host_link.lanes", "\"" + std::to_string(h.lanes) + "\" is not a PCIe width (1, 2, 4, 8, 16, 32)");
  h.bandwidth_bytes_per_s = pcieLaneBytesPerSecond(h.pcie_generation) * h.lanes * h.efficiency;

  p.dma.engines = x.count("dma.engines", 1);
  p.dma.d2d_latency_s = x.get("dma.d2d_latency", Dimension::Time);
  p.dma.memory_weight = x.get("dma.memory_weight", Dimension::Fraction);

  p.queues.hardware_queues = x.count("queues.hardware_queues", 1);
  p.queues.priority_least = x.signedInt("queues.priority_least");
  p.queues.priority_greatest = x.signedInt("queues.priority_greatest");

  // Every host call must cost > 0: the simulation's determinism relies on later calls
  // landing strictly after the simulated time already run.
  p.host.launch_overhead_s = x.positive("host.launch_overhead", Dimension::Time);
  p.host.memcpy_overhead_s = x.positive("host.memcpy_overhead", Dimension::Time);
  p.host.sync_overhead_s = x.positive("host.sync_overhead", Dimension::Time);
  p.host.event_overhead_s = x.positive("host.event_overhead", Dimension::Time);
  p.host.alloc_overhead_s = x.positive("host.alloc_overhead", Dimension::Time);
  p.host.query_overhead_s = x.positive("host.query_overhead", Dimension::Time);

  p.compute_capability_major = x.signedInt("compute_capability_major");
  p.compute_capability_minor = x.signedInt("compute_capability_minor");

  // checkQuantities already reported missing values; don't repeat them as parse errors.
  for (const auto& e : x.problems())
    if (e.find(": empty value") == std::string::npos) problems.push_back(e);
  if (!problems.empty()) {
    std::string msg = origin + ": invalid configuration:";
    for (const auto& e : problems) msg += "\n  " + e;
    throw ConfigError(msg);
  }
  return p;
}

std::string overrideNote(const config::Quantity& q) {
  return q.confidence() == config::OVERRIDDEN ? " [" + q.source() + "]" : "";
}

DeviceParams loadDeviceParams(const SimOptions& options) {
  config::Preset preset = loadPreset(options.preset);
  const bool is_file = options.preset.find('/') != std::string::npos ||
                       options.preset.find(".textproto") != std::string::npos;
  std::string origin = is_file ? options.preset : "preset " + options.preset;
  if (!options.overrides_file.empty()) {
    applyOverridesFile(preset, options.overrides_file);
    origin += " + " + options.overrides_file;
  }
  for (const auto& o : options.overrides) applyOverride(preset, o, "override \"" + o + "\"");
  if (!options.overrides.empty()) origin += " + overrides";
  return toDeviceParams(preset, origin);
}

}  // namespace cardsim::sim
