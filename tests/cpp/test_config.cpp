// Tests for simulator/Config.h: presets, overrides, validation into DeviceParams, and
// SimOptions from the environment.
#include <gtest/gtest.h>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/text_format.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "device_models/DeviceParams.h"
#include "simulator/Config.h"
#include "simulator/proto/config.pb.h"

namespace {

namespace pb = google::protobuf;
namespace cfg = cardsim::config;
using cardsim::model::DeviceParams;
using cardsim::model::DType;
using cardsim::model::pcieLaneBytesPerSecond;
using cardsim::sim::applyOverride;
using cardsim::sim::applyOverridesFile;
using cardsim::sim::ConfigError;
using cardsim::sim::loadDeviceParams;
using cardsim::sim::loadPreset;
using cardsim::sim::parsePresetText;
using cardsim::sim::presetNames;
using cardsim::sim::SimOptions;
using cardsim::sim::toDeviceParams;

const std::vector<std::string> kPresets = {"a100-sxm",  "br100",     "br104",    "h100-sxm",
                                           "h200-sxm",  "mlu370-x4", "mlu370-x8", "mlu590"};

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Runs `f`, expects it to throw ConfigError, returns the message.
std::string configError(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

double peak(const DeviceParams& p, DType t) {
  return p.compute.peak_ops_per_s[static_cast<size_t>(t)];
}

// Written into the test temp dir under a name unique to this process (test runs of two
// checkouts may share /tmp), and removed when the process ends.
std::string writeTempFile(const std::string& name, const std::string& text) {
  static std::vector<std::string> written;
  static const bool cleanup = [] {
    std::atexit([] {
      for (const std::string& p : written) std::remove(p.c_str());
    });
    return true;
  }();
  (void)cleanup;
  const std::string path = ::testing::TempDir() + std::to_string(::getpid()) + "-" + name;
  written.push_back(path);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  EXPECT_TRUE(out.good()) << "could not write " << path;
  return path;
}

std::string presetText(const cfg::Preset& p) {
  std::string text;
  EXPECT_TRUE(pb::TextFormat::PrintToString(p, &text));
  return text;
}

bool isQuantityField(const pb::FieldDescriptor* f) {
  return f->type() == pb::FieldDescriptor::TYPE_MESSAGE &&
         f->message_type() == cfg::Quantity::descriptor();
}

// Every Quantity-typed key path under a message type, from the schema (not from a preset).
void quantityPaths(const pb::Descriptor* d, const std::string& prefix,
                   std::vector<std::string>* out) {
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->type() != pb::FieldDescriptor::TYPE_MESSAGE || f->is_repeated()) continue;
    // The fabric's quantities depend on its shape: test_fabric_config.cpp checks them.
    if (prefix.empty() && f->name() == "fabric") continue;
    if (isQuantityField(f))
      out->push_back(prefix + f->name());
    else
      quantityPaths(f->message_type(), prefix + f->name() + ".", out);
  }
}

std::vector<std::string> allQuantityPaths() {
  std::vector<std::string> paths;
  quantityPaths(cfg::DeviceConfig::descriptor(), "", &paths);
  return paths;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, sep)) out.push_back(part);
  return out;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// The quantity at `path` under the device, or nullptr when it is not set.
const cfg::Quantity* findQuantity(const cfg::DeviceConfig& dev, const std::string& path) {
  const pb::Message* msg = &dev;
  for (const std::string& seg : split(path, '.')) {
    const pb::FieldDescriptor* f = msg->GetDescriptor()->FindFieldByName(seg);
    if (!f || f->type() != pb::FieldDescriptor::TYPE_MESSAGE) return nullptr;
    if (!msg->GetReflection()->HasField(*msg, f)) return nullptr;
    msg = &msg->GetReflection()->GetMessage(*msg, f);
  }
  return dynamic_cast<const cfg::Quantity*>(msg);
}

// Clears the Quantity at `path` (the whole field) from the device.
void clearQuantity(cfg::DeviceConfig* dev, const std::string& path) {
  pb::Message* msg = dev;
  const std::vector<std::string> segs = split(path, '.');
  for (size_t i = 0; i < segs.size(); ++i) {
    const pb::FieldDescriptor* f = msg->GetDescriptor()->FindFieldByName(segs[i]);
    ASSERT_NE(f, nullptr) << path;
    if (i + 1 == segs.size()) {
      msg->GetReflection()->ClearField(msg, f);
      return;
    }
    msg = msg->GetReflection()->MutableMessage(msg, f);
  }
}

cfg::Quantity* mutableQuantity(cfg::DeviceConfig* dev, const std::string& path) {
  pb::Message* msg = dev;
  for (const std::string& seg : split(path, '.')) {
    const pb::FieldDescriptor* f = msg->GetDescriptor()->FindFieldByName(seg);
    if (!f || f->type() != pb::FieldDescriptor::TYPE_MESSAGE) return nullptr;
    msg = msg->GetReflection()->MutableMessage(msg, f);
  }
  return dynamic_cast<cfg::Quantity*>(msg);
}

// Sets (and on destruction restores) one environment variable; nullptr unsets it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Closed form of a PCIe link's per-direction rate: transfer rate x encoding / 8 bits.
double pcieBytesPerSecond(double gigatransfers, double encoding, uint32_t lanes, double eff) {
  return gigatransfers * 1e9 * encoding / 8.0 * lanes * eff;
}

// ---- presetNames / loadPreset ---------------------------------------------------------

TEST(PresetNames, ExactlyTheBuiltInPresetsSorted) {
  EXPECT_EQ(presetNames(), kPresets);
}

TEST(LoadPreset, EveryPresetParsesAndCarriesItsRegistryName) {
  for (const std::string& name : presetNames()) {
    SCOPED_TRACE(name);
    cfg::Preset p;
    ASSERT_NO_THROW(p = loadPreset(name));
    EXPECT_EQ(p.name(), name);
    EXPECT_TRUE(p.has_device());
    EXPECT_FALSE(p.device().name().empty());
    EXPECT_FALSE(p.device().vendor().empty());
    EXPECT_FALSE(p.description().empty());
    EXPECT_FALSE(p.sources().empty());
  }
}

TEST(LoadPreset, UnknownNameListsEveryValidPreset) {
  const std::string msg = configError([] { loadPreset("mlu999"); });
  EXPECT_TRUE(contains(msg, "mlu999")) << msg;
  for (const std::string& name : kPresets) EXPECT_TRUE(contains(msg, name)) << name << ": " << msg;
}

TEST(LoadPreset, MissingFileNamesThePath) {
  const std::string path = ::testing::TempDir() + "no-such-dir/absent.textproto";
  const std::string msg = configError([&] { loadPreset(path); });
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "cannot open")) << msg;
}

TEST(LoadPreset, DotTextprotoNameIsTreatedAsAPath) {
  const std::string msg = configError([] { loadPreset("no-such-preset-file.textproto"); });
  EXPECT_TRUE(contains(msg, "no-such-preset-file.textproto")) << msg;
  EXPECT_TRUE(contains(msg, "cannot open")) << msg;
  EXPECT_FALSE(contains(msg, "unknown preset")) << msg;
}

TEST(LoadPreset, AParsedTextIsReusedAndABadOneFailsEachTimeNamingItsOrigin) {
  // Parses are remembered by text (a process, and a replay's forked ranks, parse the same
  // preset several times): the same text gives the same preset whatever its origin, and a
  // text that fails names the origin of each attempt.
  const std::string text = presetText(loadPreset("br100"));
  const cfg::Preset a = cardsim::sim::parsePresetText(text, "first");
  const cfg::Preset b = cardsim::sim::parsePresetText(text, "second");
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
  const std::string bad = text + "\nno_such_key: 1\n";
  for (const char* origin : {"attempt-one.textproto", "attempt-two.textproto"}) {
    const std::string msg = configError([&] { cardsim::sim::parsePresetText(bad, origin); });
    EXPECT_TRUE(contains(msg, origin)) << msg;
    EXPECT_TRUE(contains(msg, "no_such_key")) << msg;
  }
  // An override applied to one copy does not reach the next parse of the text.
  cfg::Preset changed = cardsim::sim::parsePresetText(text, "third");
  applyOverride(changed, "memory.bandwidth=1TB/s", "test");
  EXPECT_EQ(cardsim::sim::parsePresetText(text, "fourth").SerializeAsString(), a.SerializeAsString());
}

TEST(LoadPreset, FromFileRoundTripsAnEmbeddedPreset) {
  const cfg::Preset embedded = loadPreset("br100");
  const std::string path = writeTempFile("cardsim-roundtrip-br100.textproto", presetText(embedded));
  const cfg::Preset from_file = loadPreset(path);
  EXPECT_EQ(from_file.name(), "br100");
  const DeviceParams a = toDeviceParams(embedded, "preset br100");
  const DeviceParams b = toDeviceParams(from_file, path);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.memory.capacity_bytes, b.memory.capacity_bytes);
  EXPECT_DOUBLE_EQ(a.memory.bandwidth_bytes_per_s, b.memory.bandwidth_bytes_per_s);
  EXPECT_DOUBLE_EQ(peak(a, DType::FP32), peak(b, DType::FP32));
  EXPECT_DOUBLE_EQ(a.host_link.bandwidth_bytes_per_s, b.host_link.bandwidth_bytes_per_s);
}

TEST(LoadPreset, FileWithoutNameIsNamedByItsPath) {
  cfg::Preset p = loadPreset("mlu370-x8");
  p.clear_name();
  const std::string path = writeTempFile("cardsim-unnamed.textproto", presetText(p));
  const cfg::Preset loaded = loadPreset(path);
  EXPECT_EQ(loaded.name(), path);
  EXPECT_EQ(toDeviceParams(loaded, path).preset, path);
}

TEST(LoadPreset, FileWithErrorNamesTheFileAndLine) {
  const std::string text =
      "name: \"broken\"\n"
      "device {\n"
      "  nmae: \"X\"\n"
      "}\n";
  const std::string path = writeTempFile("cardsim-broken.textproto", text);
  const std::string msg = configError([&] { loadPreset(path); });
  EXPECT_TRUE(contains(msg, path + ":3:")) << msg;
  EXPECT_TRUE(contains(msg, "device.nmae")) << msg;
  EXPECT_TRUE(contains(msg, "vendor")) << msg;  // a valid key at that level
}

// ---- parsePresetText -------------------------------------------------------------------

TEST(ParsePresetText, UnknownNestedKeyNamesOriginLinePathAndValidKeys) {
  const std::string text =
      "name: \"t\"\n"
      "device {\n"
      "  memory {\n"
      "    bandwidht { value: \"1 GB/s\" }\n"
      "  }\n"
      "}\n";
  const std::string msg = configError([&] { parsePresetText(text, "my-test-origin"); });
  EXPECT_TRUE(contains(msg, "my-test-origin:4:")) << msg;
  EXPECT_TRUE(contains(msg, "device.memory.bandwidht")) << msg;
  for (const char* key : {"capacity", "bandwidth", "latency", "channels", "technology"})
    EXPECT_TRUE(contains(msg, key)) << key << ": " << msg;
}

TEST(ParsePresetText, UnknownKeyOnOneLine) {
  const std::string msg = configError([] {
    parsePresetText("device { memory { bandwidht { value: \"1 GB/s\" } } }", "inline-origin");
  });
  EXPECT_TRUE(contains(msg, "inline-origin:1:")) << msg;
  EXPECT_TRUE(contains(msg, "device.memory.bandwidht")) << msg;
  EXPECT_TRUE(contains(msg, "capacity")) << msg;
  EXPECT_TRUE(contains(msg, "bandwidth")) << msg;
}

TEST(ParsePresetText, UnknownTopLevelKeyListsTopLevelKeys) {
  const std::string msg = configError([] { parsePresetText("\n\ndevise { }\n", "top"); });
  EXPECT_TRUE(contains(msg, "top:3:")) << msg;
  EXPECT_TRUE(contains(msg, "devise")) << msg;
  for (const char* key : {"name", "description", "device", "sources"})
    EXPECT_TRUE(contains(msg, key)) << key << ": " << msg;
}

TEST(ParsePresetText, SyntaxErrorNamesOrigin) {
  const std::string msg =
      configError([] { parsePresetText("name: \"x\"\ndevice {\n  name: \"y\"\n", "unclosed"); });
  EXPECT_TRUE(contains(msg, "unclosed:")) << msg;
}

TEST(ParsePresetText, BadEnumValueIsAnError) {
  const std::string msg = configError([] {
    parsePresetText("device { memory { bandwidth { value: \"1 GB/s\" confidence: SURE } } }",
                    "enum-origin");
  });
  EXPECT_TRUE(contains(msg, "enum-origin:1:")) << msg;
  EXPECT_TRUE(contains(msg, "SURE")) << msg;
}

// A bad enum value: the key is the field, not the value.
TEST(ParsePresetText, BadEnumValueNamesTheKeyNotTheValue) {
  const std::string msg = configError([] {
    parsePresetText("device { memory { bandwidth { value: \"1 GB/s\" confidence: SURE } } }",
                    "enum-origin");
  });
  EXPECT_TRUE(contains(msg, "device.memory.bandwidth.confidence")) << msg;
  EXPECT_FALSE(contains(msg, "bandwidth.SURE")) << msg;
}

TEST(ParsePresetText, CommentsAreAllowed) {
  const cfg::Preset p = parsePresetText(
      "# a comment\nname: \"c\"  # trailing\ndevice { name: \"D\" }\n", "comments");
  EXPECT_EQ(p.name(), "c");
  EXPECT_EQ(p.device().name(), "D");
}

// ---- toDeviceParams on the presets -----------------------------------------------------

TEST(Presets, EveryPresetHasEveryQuantityWithConfidenceAndSources) {
  const std::vector<std::string> paths = allQuantityPaths();
  ASSERT_GE(paths.size(), 30u);  // the schema has dozens of numbers
  for (const std::string& name : presetNames()) {
    SCOPED_TRACE(name);
    const cfg::Preset p = loadPreset(name);
    std::set<std::string> source_ids;
    for (const cfg::Source& s : p.sources()) {
      EXPECT_FALSE(s.citation().empty()) << s.id();
      source_ids.insert(s.id());
    }
    for (const std::string& path : paths) {
      const cfg::Quantity* q = findQuantity(p.device(), path);
      ASSERT_NE(q, nullptr) << path << " missing";
      EXPECT_FALSE(trim(q->value()).empty()) << path;
      EXPECT_NE(q->confidence(), cfg::CONFIDENCE_UNSET) << path;
      EXPECT_NE(q->confidence(), cfg::OVERRIDDEN) << path << ": presets are not overrides";
      if (q->confidence() == cfg::PUBLISHED || q->confidence() == cfg::DERIVED) {
        EXPECT_FALSE(trim(q->source()).empty()) << path << " is "
                                                 << cfg::Confidence_Name(q->confidence())
                                                 << " without a source";
      }
      // Every cited id is listed in the preset's sources.
      for (const std::string& id : split(q->source(), ','))
        EXPECT_TRUE(source_ids.count(trim(id))) << path << " cites unknown source " << id;
    }
  }
}

TEST(Presets, EveryPresetConvertsWithPlausibleValues) {
  const std::map<std::string, std::string> product = {
      {"br100", "BR100"},         {"br104", "BR104"},
      {"h100-sxm", "NVIDIA H100 80GB HBM3"}, {"mlu370-x4", "MLU370-X4"},
      {"a100-sxm", "NVIDIA A100-SXM4-80GB"}, {"h200-sxm", "NVIDIA H200"},
      {"mlu370-x8", "MLU370-X8"}, {"mlu590", "MLU590"}};
  for (const std::string& name : presetNames()) {
    SCOPED_TRACE(name);
    DeviceParams p;
    ASSERT_NO_THROW(p = toDeviceParams(loadPreset(name), "preset " + name));
    EXPECT_EQ(p.preset, name);
    EXPECT_EQ(p.name, product.at(name));
    EXPECT_FALSE(p.vendor.empty());

    const auto& c = p.compute;
    EXPECT_GE(c.clusters, 1u);
    EXPECT_GE(c.cores_per_cluster, 1u);
    EXPECT_GE(c.clock_hz, 0.5e9);
    EXPECT_LE(c.clock_hz, 3e9);
    EXPECT_GT(peak(p, DType::FP32), 1e12);
    EXPECT_LT(peak(p, DType::FP32), 1e15);
    for (size_t i = 0; i < c.peak_ops_per_s.size(); ++i) EXPECT_GE(c.peak_ops_per_s[i], 0.0);
    EXPECT_GE(peak(p, DType::FP16), peak(p, DType::FP32));
    EXPECT_GE(peak(p, DType::BF16), peak(p, DType::FP32));
    EXPECT_GE(peak(p, DType::INT8), peak(p, DType::FP16));
    for (double e : c.efficiency) {
      EXPECT_GT(e, 0.0);
      EXPECT_LE(e, 1.0);
    }
    EXPECT_GT(c.dispatch_latency_s, 0.0);
    EXPECT_LT(c.dispatch_latency_s, 1e-3);
    EXPECT_GT(c.graph_dispatch_latency_s, 0.0);
    EXPECT_LE(c.graph_dispatch_latency_s, c.dispatch_latency_s);
    EXPECT_GT(c.tile_bytes, 0.0);

    EXPECT_GE(p.memory.capacity_bytes, 8ull * 1000 * 1000 * 1000);
    EXPECT_LE(p.memory.capacity_bytes, 256ull * 1000 * 1000 * 1000);
    EXPECT_GE(p.memory.bandwidth_bytes_per_s, 100e9);
    EXPECT_LE(p.memory.bandwidth_bytes_per_s, 10e12);
    EXPECT_GT(p.memory.latency_s, 0.0);
    EXPECT_LT(p.memory.latency_s, 10e-6);
    EXPECT_GE(p.memory.channels, 1u);
    EXPECT_FALSE(p.memory.technology.empty());

    const auto& h = p.host_link;
    EXPECT_GE(h.pcie_generation, 3u);
    EXPECT_LE(h.pcie_generation, 6u);
    EXPECT_EQ(h.lanes, 16u);
    EXPECT_GT(h.efficiency, 0.0);
    EXPECT_LE(h.efficiency, 1.0);
    EXPECT_GT(h.pageable_efficiency, 0.0);
    EXPECT_LE(h.pageable_efficiency, 1.0);
    EXPECT_GT(h.latency_s, 0.0);
    EXPECT_DOUBLE_EQ(h.bandwidth_bytes_per_s,
                     pcieLaneBytesPerSecond(h.pcie_generation) * h.lanes * h.efficiency);
    // A PCIe link is far slower than device memory.
    EXPECT_LT(h.bandwidth_bytes_per_s, p.memory.bandwidth_bytes_per_s);

    EXPECT_GE(p.dma.engines, 1u);
    EXPECT_GT(p.dma.d2d_latency_s, 0.0);
    EXPECT_GE(p.queues.hardware_queues, 1u);
    EXPECT_NE(p.queues.priority_least, p.queues.priority_greatest);

    for (double o : {p.host.launch_overhead_s, p.host.memcpy_overhead_s, p.host.sync_overhead_s,
                     p.host.event_overhead_s, p.host.alloc_overhead_s, p.host.query_overhead_s}) {
      EXPECT_GT(o, 0.0);
      EXPECT_LT(o, 1e-3);
    }
    EXPECT_GE(p.compute_capability_major, 1);
    EXPECT_GE(p.compute_capability_minor, 0);
  }
}

TEST(Presets, Mlu370X8Values) {
  const DeviceParams p = toDeviceParams(loadPreset("mlu370-x8"), "preset mlu370-x8");
  EXPECT_EQ(p.name, "MLU370-X8");
  EXPECT_EQ(p.vendor, "Cambricon");
  EXPECT_EQ(p.memory.capacity_bytes, 23374ull << 20);
  EXPECT_DOUBLE_EQ(p.memory.bandwidth_bytes_per_s, 307.2e9);
  EXPECT_DOUBLE_EQ(peak(p, DType::FP32), 12e12);
  EXPECT_DOUBLE_EQ(peak(p, DType::TF32), 0.0);
  EXPECT_DOUBLE_EQ(peak(p, DType::FP16), 48e12);
  EXPECT_DOUBLE_EQ(peak(p, DType::INT8), 128e12);
  EXPECT_DOUBLE_EQ(p.compute.clock_hz, 1.3e9);
  EXPECT_EQ(p.compute.clusters, 8u);
  EXPECT_EQ(p.compute.cores_per_cluster, 4u);
  EXPECT_EQ(p.memory.technology, "LPDDR5");
  EXPECT_DOUBLE_EQ(p.memory.latency_s, 600e-9);
  EXPECT_EQ(p.host_link.pcie_generation, 4u);
  EXPECT_EQ(p.host_link.lanes, 16u);
  // PCIe 4.0: 16 GT/s per lane, 128b/130b, x16, 0.8 achieved.
  EXPECT_DOUBLE_EQ(p.host_link.bandwidth_bytes_per_s,
                   pcieBytesPerSecond(16, 128.0 / 130.0, 16, 0.8));
  EXPECT_EQ(p.queues.priority_least, 7);
  EXPECT_EQ(p.queues.priority_greatest, 0);
  EXPECT_DOUBLE_EQ(p.host.launch_overhead_s, 4e-6);
  EXPECT_DOUBLE_EQ(p.host.query_overhead_s, 0.5e-6);
}

TEST(Presets, Br100Values) {
  const DeviceParams p = toDeviceParams(loadPreset("br100"), "preset br100");
  EXPECT_EQ(p.name, "BR100");
  EXPECT_EQ(p.vendor, "Biren");
  EXPECT_EQ(p.memory.capacity_bytes, 64ull << 30);
  EXPECT_DOUBLE_EQ(p.memory.bandwidth_bytes_per_s, 1.64e12);
  EXPECT_DOUBLE_EQ(peak(p, DType::FP32), 256e12);
  EXPECT_DOUBLE_EQ(peak(p, DType::FP64), 0.0);
  EXPECT_EQ(p.host_link.pcie_generation, 5u);
  // PCIe 5.0: 32 GT/s per lane, 128b/130b, x16, 0.8 achieved.
  EXPECT_DOUBLE_EQ(p.host_link.bandwidth_bytes_per_s,
                   pcieBytesPerSecond(32, 128.0 / 130.0, 16, 0.8));
  EXPECT_EQ(p.queues.priority_least, 0);
  EXPECT_EQ(p.queues.priority_greatest, -3);
}

TEST(Presets, H100Values) {
  const DeviceParams p = toDeviceParams(loadPreset("h100-sxm"), "preset h100-sxm");
  EXPECT_EQ(p.vendor, "NVIDIA");
  EXPECT_EQ(p.memory.capacity_bytes, 81559ull << 20);
  EXPECT_DOUBLE_EQ(p.memory.bandwidth_bytes_per_s, 3.35e12);
  EXPECT_DOUBLE_EQ(peak(p, DType::FP32), 66.9e12);
  EXPECT_EQ(p.compute.clusters, 132u);
  EXPECT_DOUBLE_EQ(p.compute.clock_hz, 1.98e9);
}

// What the vendor's tools print as the device's total memory, in MiB (capacities are
// binary: "80 GB" on a datasheet is 81559 MiB on an H100, not 80e9 bytes).
TEST(Presets, CapacityIsWhatTheVendorsToolsReportInMiB) {
  const std::map<std::string, uint64_t> mib = {
      {"mlu370-x8", 23374},  // cnmon, "0 MiB/ 23374 MiB" per X8 chip
      {"mlu370-x4", 24576},  // torch_mlu kineto fixture, totalMem(MiB)
      {"mlu590", 81920},     // torch_mlu fixture "80.0 GB", binary as the MLU370 one
      {"br100", 65536},      // 4 HBM2E stacks of 16 GiB (tool output not public)
      {"br104", 32768},      // 2 stacks of 16 GiB
      {"h100-sxm", 81559},   // nvidia-smi / NVML
      {"a100-sxm", 81920},   // nvidia-smi
      {"h200-sxm", 143771}}; // nvidia-smi
  ASSERT_EQ(mib.size(), presetNames().size());
  for (const std::string& name : presetNames()) {
    SCOPED_TRACE(name);
    const DeviceParams p = toDeviceParams(loadPreset(name), "preset " + name);
    EXPECT_EQ(p.memory.capacity_bytes % (1ull << 20), 0u) << "not a whole number of MiB";
    EXPECT_EQ(p.memory.capacity_bytes >> 20, mib.at(name));
  }
}

double vectorPeak(const DeviceParams& p, DType t) {
  return p.compute.vector_peak_ops_per_s[static_cast<size_t>(t)];
}

TEST(Presets, EveryPresetHasVectorPeaksWhereItHasMatrixPeaksAndNoHigher) {
  for (const std::string& name : presetNames()) {
    SCOPED_TRACE(name);
    const DeviceParams p = toDeviceParams(loadPreset(name), "preset " + name);
    for (DType t : {DType::FP64, DType::FP32, DType::FP16, DType::BF16}) {
      SCOPED_TRACE(cardsim::model::dtypeName(t));
      EXPECT_EQ(vectorPeak(p, t) > 0, peak(p, t) > 0);
      EXPECT_LE(vectorPeak(p, t), peak(p, t));
    }
    // Tensor-core cards: 16-bit GEMMs are far faster than 16-bit vector work.
    EXPECT_LE(vectorPeak(p, DType::FP16), peak(p, DType::FP16) / 4);
    EXPECT_GT(p.memory.cluster_bandwidth_bytes_per_s, p.memory.bandwidth_bytes_per_s / p.compute.clusters);
    EXPECT_LE(p.memory.cluster_bandwidth_bytes_per_s, p.memory.bandwidth_bytes_per_s);
    EXPECT_GT(p.dma.memory_weight, 0.0);
    EXPECT_GE(p.compute.wave_overhead_cycles, 0.0);
  }
}

TEST(Presets, H100MatrixAndVectorPeaks) {
  const DeviceParams p = toDeviceParams(loadPreset("h100-sxm"), "preset h100-sxm");
  EXPECT_DOUBLE_EQ(peak(p, DType::FP16), 989.4e12);
  EXPECT_DOUBLE_EQ(vectorPeak(p, DType::FP16), 133.8e12);
  EXPECT_DOUBLE_EQ(peak(p, DType::FP64), 66.9e12);
  EXPECT_DOUBLE_EQ(vectorPeak(p, DType::FP64), 33.5e12);
  EXPECT_DOUBLE_EQ(peak(p, DType::TF32), 494.7e12);
  using cardsim::model::KernelClass;
  using cardsim::model::peakFor;
  // GEMMs run on the matrix units, everything else on the vector units; TF32 and INT8
  // vector work at the fp32 vector rate.
  EXPECT_DOUBLE_EQ(peakFor(p.compute, KernelClass::Gemm, DType::BF16), 989.4e12);
  EXPECT_DOUBLE_EQ(peakFor(p.compute, KernelClass::Elementwise, DType::BF16), 133.8e12);
  EXPECT_DOUBLE_EQ(peakFor(p.compute, KernelClass::Reduction, DType::FP16), 133.8e12);
  EXPECT_DOUBLE_EQ(peakFor(p.compute, KernelClass::Other, DType::FP16), 133.8e12);
  EXPECT_DOUBLE_EQ(peakFor(p.compute, KernelClass::Gemm, DType::TF32), 494.7e12);
  EXPECT_DOUBLE_EQ(peakFor(p.compute, KernelClass::Elementwise, DType::TF32), 66.9e12);
  EXPECT_DOUBLE_EQ(peakFor(p.compute, KernelClass::Elementwise, DType::INT8), 66.9e12);
}

TEST(Presets, Mlu370SharingAndCycleParameters) {
  const DeviceParams p = toDeviceParams(loadPreset("mlu370-x8"), "preset mlu370-x8");
  EXPECT_DOUBLE_EQ(p.memory.cluster_bandwidth_bytes_per_s, 128e9);
  EXPECT_DOUBLE_EQ(p.dma.memory_weight, 0.25);
  EXPECT_DOUBLE_EQ(p.compute.wave_overhead_cycles, 100.0);
  EXPECT_DOUBLE_EQ(vectorPeak(p, DType::FP16), 1e12);
  EXPECT_DOUBLE_EQ(vectorPeak(p, DType::FP32), 0.5e12);
}

TEST(ToDeviceParams, VectorPeakAboveTheMatrixPeakIsRejected) {
  cfg::Preset p = loadPreset("h100-sxm");
  applyOverride(p, "compute.vector_peak.fp16=2000 TFLOPS", "cli");
  const std::string msg = configError([&] { toDeviceParams(p, "preset h100-sxm"); });
  EXPECT_TRUE(contains(msg, "device.compute.vector_peak.fp16: \"2000 TFLOPS\" exceeds compute.peak.fp16 "
                            "(\"989.4 TFLOPS\")")) << msg;
  EXPECT_TRUE(contains(msg, "override from cli")) << msg;
}

TEST(ToDeviceParams, VectorPeakMustBeSetExactlyWhereTheMatrixPeakIs) {
  cfg::Preset p = loadPreset("h100-sxm");
  applyOverride(p, "compute.vector_peak.bf16=0 TFLOPS", "cli");
  std::string msg = configError([&] { toDeviceParams(p, "preset h100-sxm"); });
  EXPECT_TRUE(contains(msg, "device.compute.vector_peak.bf16: \"0 TFLOPS\" must be above 0 exactly where")) << msg;
  cfg::Preset q = loadPreset("mlu370-x8");  // no fp64 units
  applyOverride(q, "compute.vector_peak.fp64=1 TFLOPS", "cli");
  msg = configError([&] { toDeviceParams(q, "preset mlu370-x8"); });
  EXPECT_TRUE(contains(msg, "device.compute.vector_peak.fp64: \"1 TFLOPS\" must be above 0 exactly where")) << msg;
}

TEST(ToDeviceParams, WaveOverheadIsCountedInCycles) {
  cfg::Preset p = loadPreset("br100");
  applyOverride(p, "compute.wave_overhead=250 cycles", "cli");
  EXPECT_DOUBLE_EQ(toDeviceParams(p, "x").compute.wave_overhead_cycles, 250.0);
  applyOverride(p, "compute.wave_overhead=1 cycle", "cli");
  EXPECT_DOUBLE_EQ(toDeviceParams(p, "x").compute.wave_overhead_cycles, 1.0);
  applyOverride(p, "compute.wave_overhead=2 us", "cli");
  const std::string msg = configError([&] { toDeviceParams(p, "x"); });
  EXPECT_TRUE(contains(msg, "device.compute.wave_overhead")) << msg;
  EXPECT_TRUE(contains(msg, "cycle")) << msg;
}

TEST(ToDeviceParams, SharingParametersAreChecked) {
  cfg::Preset p = loadPreset("br100");
  applyOverride(p, "dma.memory_weight=1.5", "cli");
  applyOverride(p, "memory.cluster_bandwidth=0 GB/s", "cli");
  const std::string msg = configError([&] { toDeviceParams(p, "x"); });
  EXPECT_TRUE(contains(msg, "device.dma.memory_weight")) << msg;
  EXPECT_TRUE(contains(msg, "device.memory.cluster_bandwidth")) << msg;
}

TEST(PcieLaneRate, ClosedForms) {
  EXPECT_DOUBLE_EQ(pcieLaneBytesPerSecond(1), 2.5e9 * 0.8 / 8);
  EXPECT_DOUBLE_EQ(pcieLaneBytesPerSecond(2), 5e9 * 0.8 / 8);
  EXPECT_DOUBLE_EQ(pcieLaneBytesPerSecond(3), 8e9 * 128.0 / 130.0 / 8);
  EXPECT_DOUBLE_EQ(pcieLaneBytesPerSecond(4), 16e9 * 128.0 / 130.0 / 8);
  EXPECT_DOUBLE_EQ(pcieLaneBytesPerSecond(5), 32e9 * 128.0 / 130.0 / 8);
  EXPECT_DOUBLE_EQ(pcieLaneBytesPerSecond(6), 64e9 * 242.0 / 256.0 / 8);
  EXPECT_DOUBLE_EQ(pcieLaneBytesPerSecond(0), 0.0);
  EXPECT_DOUBLE_EQ(pcieLaneBytesPerSecond(7), 0.0);
}

// ---- toDeviceParams validation ---------------------------------------------------------

TEST(ToDeviceParams, PublishedQuantityWithoutSourceIsRejected) {
  // Parse preset text, drop the source of a PUBLISHED number.
  cfg::Preset p = parsePresetText(presetText(loadPreset("mlu370-x8")), "edited-text");
  ASSERT_EQ(p.device().memory().capacity().confidence(), cfg::PUBLISHED);
  p.mutable_device()->mutable_memory()->mutable_capacity()->clear_source();
  const std::string msg = configError([&] { toDeviceParams(p, "edited-text"); });
  EXPECT_TRUE(contains(msg, "edited-text")) << msg;
  EXPECT_TRUE(contains(msg, "device.memory.capacity.source")) << msg;
  EXPECT_TRUE(contains(msg, "PUBLISHED")) << msg;
}

TEST(ToDeviceParams, PublishedSourceRemovedInTextIsRejected) {
  // The same, edited as text: a PUBLISHED quantity written without its source.
  const std::string text =
      "name: \"x\"\n" + presetText(loadPreset("br100")).substr(presetText(loadPreset("br100")).find("device {"));
  cfg::Preset base = parsePresetText(text, "t");
  ASSERT_NO_THROW(toDeviceParams(base, "t"));
  cfg::Quantity* bw = base.mutable_device()->mutable_memory()->mutable_bandwidth();
  ASSERT_EQ(bw->confidence(), cfg::PUBLISHED);
  const std::string needle = "source: \"" + bw->source() + "\"";
  std::string printed = presetText(base);
  // Remove the source line that follows the bandwidth value.
  const size_t at = printed.find(needle, printed.find("value: \"1.64 TB/s\""));
  ASSERT_NE(at, std::string::npos);
  printed.erase(at, needle.size());
  const cfg::Preset edited = parsePresetText(printed, "edited.textproto");
  const std::string msg = configError([&] { toDeviceParams(edited, "edited.textproto"); });
  EXPECT_TRUE(contains(msg, "device.memory.bandwidth.source")) << msg;
  EXPECT_FALSE(contains(msg, "device.memory.capacity")) << msg;
}

TEST(ToDeviceParams, EverySourcedQuantityNeedsItsSource) {
  // For every preset and every PUBLISHED or DERIVED number, dropping its source is an error
  // naming exactly that key.
  for (const std::string& name : presetNames()) {
    const cfg::Preset base = loadPreset(name);
    int checked = 0;
    for (const std::string& path : allQuantityPaths()) {
      const cfg::Quantity* q = findQuantity(base.device(), path);
      ASSERT_NE(q, nullptr) << name << " " << path;
      if (q->confidence() != cfg::PUBLISHED && q->confidence() != cfg::DERIVED) continue;
      cfg::Preset p = base;
      mutableQuantity(p.mutable_device(), path)->clear_source();
      const std::string msg = configError([&] { toDeviceParams(p, name); });
      EXPECT_TRUE(contains(msg, "device." + path + ".source")) << name << ": " << msg;
      ++checked;
    }
    EXPECT_GT(checked, 0) << name << " has no sourced numbers";
  }
}

TEST(ToDeviceParams, AssumedQuantityNeedsNoSource) {
  cfg::Preset p = loadPreset("mlu370-x8");
  cfg::Quantity* q = p.mutable_device()->mutable_memory()->mutable_latency();
  ASSERT_EQ(q->confidence(), cfg::ASSUMED);
  q->clear_source();
  EXPECT_NO_THROW(toDeviceParams(p, "assumed"));
}

TEST(ToDeviceParams, EveryQuantityNeedsAConfidence) {
  const cfg::Preset base = loadPreset("mlu590");
  for (const std::string& path : allQuantityPaths()) {
    cfg::Preset p = base;
    mutableQuantity(p.mutable_device(), path)->set_confidence(cfg::CONFIDENCE_UNSET);
    const std::string msg = configError([&] { toDeviceParams(p, "conf"); });
    EXPECT_TRUE(contains(msg, "device." + path + ".confidence")) << msg;
  }
}

TEST(ToDeviceParams, EveryQuantityIsRequired) {
  const cfg::Preset base = loadPreset("br104");
  for (const std::string& path : allQuantityPaths()) {
    if (path == "compute.tile_cycles") continue;   // optional: TileCyclesAbsentAreDerived...
    cfg::Preset p = base;
    clearQuantity(p.mutable_device(), path);
    const std::string msg = configError([&] { toDeviceParams(p, "missing-origin"); });
    EXPECT_TRUE(contains(msg, "device." + path + ": missing")) << path << ": " << msg;
    EXPECT_TRUE(contains(msg, "missing-origin")) << msg;
  }
}

TEST(ToDeviceParams, TileCyclesAbsentAreDerivedAndPinnedBeforeOverrides) {
  // A configuration from before compute.tile_cycles (a recording's header) derives it: the
  // tile's bytes through one cluster's port, in cycles. An override pins that value first, so
  // a what-if of the port's bandwidth (or the clock) does not recut the kernels.
  cfg::Preset p = loadPreset("mlu370-x8");
  p.mutable_device()->mutable_compute()->clear_tile_cycles();
  const DeviceParams derived = toDeviceParams(p, "old");
  EXPECT_DOUBLE_EQ(derived.compute.tile_cycles, 512.0 * 1024 / 128e9 * 1.3e9);
  applyOverride(p, "memory.cluster_bandwidth=1 TB/s", "cli");
  applyOverride(p, "compute.clock=2 GHz", "cli");
  const DeviceParams what_if = toDeviceParams(p, "old + overrides");
  EXPECT_DOUBLE_EQ(what_if.compute.tile_cycles, derived.compute.tile_cycles);
  EXPECT_DOUBLE_EQ(what_if.memory.cluster_bandwidth_bytes_per_s, 1e12);
  // Given, it is the given value, and overridable like any key.
  cfg::Preset q = loadPreset("mlu370-x8");
  EXPECT_DOUBLE_EQ(toDeviceParams(q, "preset").compute.tile_cycles, 5325);
  applyOverride(q, "compute.tile_cycles=100 cycles", "cli");
  EXPECT_DOUBLE_EQ(toDeviceParams(q, "preset").compute.tile_cycles, 100);
  applyOverride(q, "compute.tile_cycles=-1 cycles", "cli");
  EXPECT_TRUE(contains(configError([&] { toDeviceParams(q, "bad"); }), "device.compute.tile_cycles"));
}

TEST(ToDeviceParams, EmptyValueIsReportedOnce) {
  cfg::Preset p = loadPreset("br104");
  p.mutable_device()->mutable_memory()->mutable_bandwidth()->set_value("  ");
  const std::string msg = configError([&] { toDeviceParams(p, "empty"); });
  EXPECT_TRUE(contains(msg, "device.memory.bandwidth.value: missing")) << msg;
  EXPECT_FALSE(contains(msg, "empty value")) << msg;
}

TEST(ToDeviceParams, MissingDeviceAndNameAreReported) {
  const std::string msg = configError([] { toDeviceParams(cfg::Preset(), "empty-preset"); });
  EXPECT_TRUE(contains(msg, "empty-preset")) << msg;
  EXPECT_TRUE(contains(msg, "device: missing")) << msg;
  EXPECT_TRUE(contains(msg, "device.name: missing")) << msg;
}

TEST(ToDeviceParams, OriginNamesThePresetWhenUnnamed) {
  cfg::Preset p = loadPreset("br104");
  p.clear_name();
  EXPECT_EQ(toDeviceParams(p, "some origin").preset, "some origin");
}

// ---- applyOverride ---------------------------------------------------------------------

TEST(ApplyOverride, SetsValueAndMarksOverridden) {
  cfg::Preset p = loadPreset("mlu370-x8");
  applyOverride(p, "memory.bandwidth=3.2TB/s", "cli");
  const cfg::Quantity& q = p.device().memory().bandwidth();
  EXPECT_EQ(q.value(), "3.2TB/s");
  EXPECT_EQ(q.confidence(), cfg::OVERRIDDEN);
  EXPECT_TRUE(contains(q.source(), "cli")) << q.source();
  const DeviceParams d = toDeviceParams(p, "preset mlu370-x8 + overrides");
  EXPECT_DOUBLE_EQ(d.memory.bandwidth_bytes_per_s, 3.2e12);
  // Nothing else moved.
  EXPECT_EQ(d.memory.capacity_bytes, 23374ull << 20);
  EXPECT_EQ(p.device().memory().capacity().confidence(), cfg::PUBLISHED);
}

TEST(ApplyOverride, TrimsSpacesAroundKeyAndValue) {
  cfg::Preset p = loadPreset("br100");
  applyOverride(p, "  compute.clock =  2 GHz ", "cli");
  EXPECT_EQ(p.device().compute().clock().value(), "2 GHz");
  EXPECT_DOUBLE_EQ(toDeviceParams(p, "o").compute.clock_hz, 2e9);
}

TEST(ApplyOverride, NestedCountAndFraction) {
  cfg::Preset p = loadPreset("br100");
  applyOverride(p, "compute.peak.fp32=100 TFLOPS", "cli");
  applyOverride(p, "compute.efficiency.gemm=0.6", "cli");
  applyOverride(p, "host_link.lanes=8", "cli");
  applyOverride(p, "queues.priority_greatest=-5", "cli");
  const DeviceParams d = toDeviceParams(p, "o");
  EXPECT_DOUBLE_EQ(peak(d, DType::FP32), 100e12);
  EXPECT_DOUBLE_EQ(d.compute.efficiency[0], 0.6);
  EXPECT_EQ(d.host_link.lanes, 8u);
  EXPECT_EQ(d.queues.priority_greatest, -5);
  EXPECT_DOUBLE_EQ(d.host_link.bandwidth_bytes_per_s,
                   pcieBytesPerSecond(32, 128.0 / 130.0, 8, 0.8));
}

TEST(ApplyOverride, StringFields) {
  cfg::Preset p = loadPreset("mlu590");
  applyOverride(p, "name=MLU590-H8", "cli");
  applyOverride(p, "memory.technology=HBM3", "cli");
  const DeviceParams d = toDeviceParams(p, "o");
  EXPECT_EQ(d.name, "MLU590-H8");
  EXPECT_EQ(d.memory.technology, "HBM3");
}

TEST(ApplyOverride, LaterOverrideWins) {
  cfg::Preset p = loadPreset("mlu590");
  applyOverride(p, "memory.bandwidth=1 TB/s", "first");
  applyOverride(p, "memory.bandwidth=1.5 TB/s", "second");
  EXPECT_DOUBLE_EQ(toDeviceParams(p, "o").memory.bandwidth_bytes_per_s, 1.5e12);
  EXPECT_TRUE(contains(p.device().memory().bandwidth().source(), "second"));
}

TEST(ApplyOverride, UnknownKeyNamesKeyAndListsValidKeysAtThatLevel) {
  cfg::Preset p = loadPreset("mlu370-x8");
  const std::string msg = configError([&] { applyOverride(p, "memory.bandwidht=1 GB/s", "cli"); });
  EXPECT_TRUE(contains(msg, "cli")) << msg;
  EXPECT_TRUE(contains(msg, "memory.bandwidht")) << msg;
  for (const char* key : {"capacity", "bandwidth", "latency", "channels", "technology"})
    EXPECT_TRUE(contains(msg, key)) << key << ": " << msg;
  // The top-level keys are not listed for a second-level mistake.
  EXPECT_FALSE(contains(msg, "host_link")) << msg;
}

TEST(ApplyOverride, UnknownTopLevelKeyListsDeviceKeys) {
  cfg::Preset p = loadPreset("mlu370-x8");
  const std::string msg = configError([&] { applyOverride(p, "memroy.bandwidth=1 GB/s", "cli"); });
  EXPECT_TRUE(contains(msg, "memroy")) << msg;
  for (const char* key : {"name", "vendor", "compute", "memory", "host_link", "dma", "queues",
                          "host"})
    EXPECT_TRUE(contains(msg, key)) << key << ": " << msg;
}

TEST(ApplyOverride, GroupIsNotAValue) {
  cfg::Preset p = loadPreset("mlu370-x8");
  const std::string msg = configError([&] { applyOverride(p, "memory=3", "cli"); });
  EXPECT_TRUE(contains(msg, "memory")) << msg;
  EXPECT_TRUE(contains(msg, "group")) << msg;
  EXPECT_TRUE(contains(msg, "bandwidth")) << msg;  // names the keys under it
  // And the preset is unchanged.
  EXPECT_EQ(p.device().memory().bandwidth().value(), "307.2 GB/s");
}

TEST(ApplyOverride, QuantityHasNoSubKeys) {
  cfg::Preset p = loadPreset("mlu370-x8");
  const std::string msg =
      configError([&] { applyOverride(p, "memory.bandwidth.value=1 GB/s", "cli"); });
  EXPECT_TRUE(contains(msg, "memory.bandwidth")) << msg;
}

TEST(ApplyOverride, MalformedAssignments) {
  cfg::Preset p = loadPreset("mlu370-x8");
  EXPECT_TRUE(contains(configError([&] { applyOverride(p, "memory.bandwidth", "cli"); }),
                       "key.path=value"));
  EXPECT_TRUE(contains(configError([&] { applyOverride(p, "=3 GB/s", "cli"); }), "no key"));
  EXPECT_TRUE(contains(configError([&] { applyOverride(p, "memory.bandwidth=  ", "cli"); }),
                       "no value"));
  EXPECT_TRUE(contains(configError([&] { applyOverride(p, "sources=x", "cli"); }), "sources"));
  for (const char* stray : {"memory.bandwidth.=1TB/s", ".memory.bandwidth=1TB/s", "memory..bandwidth=1TB/s"})
    EXPECT_TRUE(contains(configError([&] { applyOverride(p, stray, "cli"); }), "empty segment")) << stray;
}

TEST(ApplyOverride, WrongUnitIsReportedByToDeviceParamsWithOrigin) {
  cfg::Preset p = loadPreset("mlu370-x8");
  ASSERT_NO_THROW(applyOverride(p, "memory.bandwidth=3.2 TB", "override \"memory.bandwidth=3.2 TB\""));
  const std::string msg = configError([&] { toDeviceParams(p, "preset mlu370-x8 + overrides"); });
  EXPECT_TRUE(contains(msg, "device.memory.bandwidth")) << msg;
  EXPECT_TRUE(contains(msg, "override \"memory.bandwidth=3.2 TB\"")) << msg;
  EXPECT_TRUE(contains(msg, "\"TB\"")) << msg;
  EXPECT_TRUE(contains(msg, "GB/s")) << msg;  // lists valid units
}

TEST(ApplyOverride, ZeroHostOverheadIsRejected) {
  cfg::Preset p = loadPreset("mlu370-x8");
  applyOverride(p, "host.launch_overhead=0 us", "cli");
  const std::string msg = configError([&] { toDeviceParams(p, "o"); });
  EXPECT_TRUE(contains(msg, "device.host.launch_overhead")) << msg;
  EXPECT_TRUE(contains(msg, "greater than 0")) << msg;
  EXPECT_TRUE(contains(msg, "cli")) << msg;
}

TEST(ApplyOverride, EveryHostOverheadMustBePositive) {
  for (const char* key : {"launch_overhead", "memcpy_overhead", "sync_overhead", "event_overhead",
                          "alloc_overhead", "query_overhead"}) {
    cfg::Preset p = loadPreset("br104");
    applyOverride(p, std::string("host.") + key + "=0 ns", "cli");
    const std::string msg = configError([&] { toDeviceParams(p, "o"); });
    EXPECT_TRUE(contains(msg, std::string("device.host.") + key)) << msg;
  }
}

TEST(ApplyOverride, RangeChecks) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"compute.clusters=0", "device.compute.clusters"},
      {"memory.bandwidth=0 GB/s", "device.memory.bandwidth"},
      {"memory.capacity=0 GiB", "device.memory.capacity"},
      {"compute.peak.fp32=0 TFLOPS", "device.compute.peak.fp32"},
      {"compute.efficiency.gemm=1.2", "device.compute.efficiency.gemm"},
      {"host_link.lanes=3", "device.host_link.lanes"},
      {"host_link.pcie_generation=7", "device.host_link.pcie_generation"},
      {"dma.engines=-1", "device.dma.engines"},
      {"compute.clusters=2.5", "device.compute.clusters"},
  };
  for (const auto& [assignment, key] : cases) {
    cfg::Preset p = loadPreset("mlu370-x8");
    applyOverride(p, assignment, "cli");
    const std::string msg = configError([&] { toDeviceParams(p, "o"); });
    EXPECT_TRUE(contains(msg, key)) << assignment << ": " << msg;
  }
}

TEST(ApplyOverride, SeveralProblemsAreReportedTogether) {
  cfg::Preset p = loadPreset("mlu370-x8");
  applyOverride(p, "memory.bandwidth=3.2 TB", "a");
  applyOverride(p, "compute.clock=fast", "b");
  const std::string msg = configError([&] { toDeviceParams(p, "o"); });
  EXPECT_TRUE(contains(msg, "device.memory.bandwidth")) << msg;
  EXPECT_TRUE(contains(msg, "device.compute.clock")) << msg;
}

// Signed integers ("1e12" is not one) are range-checked, never cast blindly.
TEST(ApplyOverride, SignedCountsOutOfIntRangeAreRejected) {
  for (const char* assignment :
       {"queues.priority_least=1e12", "queues.priority_greatest=-1e12",
        "compute_capability_major=3e9", "compute_capability_minor=1e10"}) {
    cfg::Preset p = loadPreset("mlu370-x8");
    applyOverride(p, assignment, "cli");
    const std::string key =
        "device." + std::string(assignment).substr(0, std::string(assignment).find('='));
    const std::string msg = configError([&] { toDeviceParams(p, "o"); });
    EXPECT_TRUE(contains(msg, key)) << assignment << ": " << msg;
  }
}

// A sub-key under a string field is not a group.
TEST(ApplyOverride, SubKeyOfStringFieldIsNotCalledAGroup) {
  cfg::Preset p = loadPreset("mlu370-x8");
  const std::string msg = configError([&] { applyOverride(p, "name.x=3", "cli"); });
  EXPECT_TRUE(contains(msg, "name.x")) << msg;
  EXPECT_FALSE(contains(msg, "names a group")) << msg;
  EXPECT_EQ(p.device().name(), "MLU370-X8");
}

// ---- applyOverridesFile ----------------------------------------------------------------

TEST(ApplyOverridesFile, CommentsAndBlankLines) {
  const std::string path = writeTempFile("cardsim-overrides-ok.conf",
                                         "# tuned for a test\n"
                                         "\n"
                                         "memory.bandwidth = 1 TB/s   # measured\n"
                                         "   \n"
                                         "compute.clock=2 GHz\n"
                                         "  # indented comment\n"
                                         "memory.technology = HBM3\n");
  cfg::Preset p = loadPreset("mlu370-x4");
  applyOverridesFile(p, path);
  const DeviceParams d = toDeviceParams(p, path);
  EXPECT_DOUBLE_EQ(d.memory.bandwidth_bytes_per_s, 1e12);
  EXPECT_DOUBLE_EQ(d.compute.clock_hz, 2e9);
  EXPECT_EQ(d.memory.technology, "HBM3");
  EXPECT_EQ(p.device().memory().bandwidth().confidence(), cfg::OVERRIDDEN);
  EXPECT_TRUE(contains(p.device().memory().bandwidth().source(), path + ":3"))
      << p.device().memory().bandwidth().source();
  EXPECT_TRUE(contains(p.device().compute().clock().source(), path + ":5"))
      << p.device().compute().clock().source();
}

TEST(ApplyOverridesFile, ErrorNamesFileAndLine) {
  const std::string path = writeTempFile("cardsim-overrides-bad.conf",
                                         "# header\n"
                                         "memory.bandwidth = 1 TB/s\n"
                                         "memory.bandwidht = 2 TB/s\n");
  cfg::Preset p = loadPreset("mlu370-x4");
  const std::string msg = configError([&] { applyOverridesFile(p, path); });
  EXPECT_TRUE(contains(msg, path + ":3")) << msg;
  EXPECT_TRUE(contains(msg, "memory.bandwidht")) << msg;
}

TEST(ApplyOverridesFile, BadValueNamesFileAndLineAtValidation) {
  const std::string path = writeTempFile("cardsim-overrides-unit.conf",
                                         "\n"
                                         "memory.latency = 600 GHz\n");
  cfg::Preset p = loadPreset("mlu370-x4");
  applyOverridesFile(p, path);
  const std::string msg = configError([&] { toDeviceParams(p, "o"); });
  EXPECT_TRUE(contains(msg, "device.memory.latency")) << msg;
  EXPECT_TRUE(contains(msg, path + ":2")) << msg;
}

TEST(ApplyOverridesFile, MissingFileNamesPath) {
  cfg::Preset p = loadPreset("mlu370-x4");
  const std::string path = ::testing::TempDir() + "cardsim-no-such-overrides.conf";
  const std::string msg = configError([&] { applyOverridesFile(p, path); });
  EXPECT_TRUE(contains(msg, path)) << msg;
}

// ---- loadDeviceParams ------------------------------------------------------------------

TEST(LoadDeviceParams, PresetFileThenCommandLineOverrides) {
  const std::string path = writeTempFile("cardsim-overrides-combined.conf",
                                         "memory.bandwidth = 1 TB/s\n"
                                         "compute.clock = 1.5 GHz\n");
  SimOptions o;
  o.preset = "br104";
  o.overrides_file = path;
  o.overrides = {"memory.bandwidth=2 TB/s"};
  const DeviceParams d = loadDeviceParams(o);
  EXPECT_EQ(d.name, "BR104");
  EXPECT_DOUBLE_EQ(d.memory.bandwidth_bytes_per_s, 2e12);  // command line beats file
  EXPECT_DOUBLE_EQ(d.compute.clock_hz, 1.5e9);
}

TEST(LoadDeviceParams, DefaultsGiveMlu370X8) {
  const DeviceParams d = loadDeviceParams(SimOptions{});
  EXPECT_EQ(d.name, "MLU370-X8");
  EXPECT_DOUBLE_EQ(d.memory.bandwidth_bytes_per_s, 307.2e9);
}

TEST(LoadDeviceParams, WrongUnitOverrideNamesKeyAndOverride) {
  SimOptions o;
  o.preset = "mlu370-x8";
  o.overrides = {"memory.bandwidth=3.2 TB"};
  const std::string msg = configError([&] { loadDeviceParams(o); });
  EXPECT_TRUE(contains(msg, "device.memory.bandwidth")) << msg;
  EXPECT_TRUE(contains(msg, "memory.bandwidth=3.2 TB")) << msg;
  EXPECT_TRUE(contains(msg, "mlu370-x8")) << msg;
}

TEST(LoadDeviceParams, PresetFromPath) {
  const std::string path =
      writeTempFile("cardsim-h100-copy.textproto", presetText(loadPreset("h100-sxm")));
  SimOptions o;
  o.preset = path;
  const DeviceParams d = loadDeviceParams(o);
  EXPECT_EQ(d.memory.capacity_bytes, 81559ull << 20);
}

TEST(LoadDeviceParams, PresetNamesInAnyCase) {
  SimOptions upper, lower;
  upper.preset = "H100-SXM";
  lower.preset = "h100-sxm";
  EXPECT_EQ(loadDeviceParams(upper).memory.capacity_bytes, loadDeviceParams(lower).memory.capacity_bytes);
  EXPECT_EQ(loadPreset("Br100").device().name(), loadPreset("br100").device().name());
}

TEST(LoadDeviceParams, UnknownPresetIsConfigError) {
  SimOptions o;
  o.preset = "nope";
  const std::string msg = configError([&] { loadDeviceParams(o); });
  EXPECT_TRUE(contains(msg, "mlu370-x8")) << msg;
}

// ---- SimOptions::fromEnvironment -------------------------------------------------------

TEST(SimOptionsEnv, UnsetKeepsDefaults) {
  ScopedEnv a("CARDSIM_PRESET", nullptr), b("CARDSIM_DEVICES", nullptr),
      c("CARDSIM_CONFIG", nullptr);
  SimOptions defaults;
  defaults.preset = "br100";
  defaults.devices = 3;
  defaults.overrides = {"memory.bandwidth=1 TB/s"};
  defaults.overrides_file = "/x/y.conf";
  const SimOptions o = SimOptions::fromEnvironment(defaults);
  EXPECT_EQ(o.preset, "br100");
  EXPECT_EQ(o.devices, 3u);
  EXPECT_EQ(o.overrides, defaults.overrides);
  EXPECT_EQ(o.overrides_file, "/x/y.conf");
}

TEST(SimOptionsEnv, EmptyValuesKeepDefaults) {
  ScopedEnv a("CARDSIM_PRESET", ""), b("CARDSIM_DEVICES", ""), c("CARDSIM_CONFIG", "");
  const SimOptions o = SimOptions::fromEnvironment(SimOptions{});
  EXPECT_EQ(o.preset, "mlu370-x8");
  EXPECT_EQ(o.devices, 8u);
  EXPECT_TRUE(o.overrides_file.empty());
}

TEST(SimOptionsEnv, ReadsAllThree) {
  ScopedEnv a("CARDSIM_PRESET", "br104"), b("CARDSIM_DEVICES", "2"),
      c("CARDSIM_CONFIG", "/tmp/cardsim-env.conf");
  SimOptions defaults;
  defaults.overrides = {"compute.clock=1 GHz"};
  const SimOptions o = SimOptions::fromEnvironment(defaults);
  EXPECT_EQ(o.preset, "br104");
  EXPECT_EQ(o.devices, 2u);
  EXPECT_EQ(o.overrides_file, "/tmp/cardsim-env.conf");
  EXPECT_EQ(o.overrides, defaults.overrides);  // not touched by the environment
}

TEST(SimOptionsEnv, DeviceCountBounds) {
  {
    ScopedEnv d("CARDSIM_DEVICES", "1");
    EXPECT_EQ(SimOptions::fromEnvironment(SimOptions{}).devices, 1u);
  }
  {
    ScopedEnv d("CARDSIM_DEVICES", "4096");
    EXPECT_EQ(SimOptions::fromEnvironment(SimOptions{}).devices, 4096u);
  }
}

TEST(SimOptionsEnv, BadDeviceCountNamesTheVariable) {
  for (const char* bad : {"abc", "0", "-1", "4097", "3x", "2.5", "99999999999999999999"}) {
    ScopedEnv d("CARDSIM_DEVICES", bad);
    const std::string msg = configError([] { SimOptions::fromEnvironment(SimOptions{}); });
    EXPECT_TRUE(contains(msg, "CARDSIM_DEVICES")) << bad << ": " << msg;
    EXPECT_TRUE(contains(msg, bad)) << bad << ": " << msg;
  }
}

TEST(SimOptionsEnv, RestoresEnvironment) {
  // The guard used above really restores: a sanity check on the test itself.
  unsetenv("CARDSIM_TEST_PROBE");
  {
    ScopedEnv e("CARDSIM_TEST_PROBE", "1");
    ASSERT_NE(std::getenv("CARDSIM_TEST_PROBE"), nullptr);
  }
  EXPECT_EQ(std::getenv("CARDSIM_TEST_PROBE"), nullptr);
}

TEST(SimOptionsEnv, ConfigFileFromEnvironmentIsApplied) {
  const std::string path =
      writeTempFile("cardsim-env-overrides.conf", "memory.bandwidth = 700 GB/s\n");
  ScopedEnv a("CARDSIM_PRESET", "mlu370-x4"), b("CARDSIM_DEVICES", nullptr),
      c("CARDSIM_CONFIG", path.c_str());
  const DeviceParams d = loadDeviceParams(SimOptions::fromEnvironment(SimOptions{}));
  EXPECT_EQ(d.name, "MLU370-X4");
  EXPECT_DOUBLE_EQ(d.memory.bandwidth_bytes_per_s, 700e9);
}

}  // namespace

TEST(OverrideKey, IsTheKeyApplyOverrideReads) {
  EXPECT_EQ(cardsim::sim::overrideKey("fabric.nodes=2"), "fabric.nodes");
  EXPECT_EQ(cardsim::sim::overrideKey("  device.fabric.nodes = 2"), "fabric.nodes");
  EXPECT_EQ(cardsim::sim::overrideKey("memory.bandwidth=1TB/s"), "memory.bandwidth");
  EXPECT_EQ(cardsim::sim::overrideKey("no equals sign"), "");
}
