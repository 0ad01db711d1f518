#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "TestSupport.hpp"
#include "kvscope/CheckpointSpec.hpp"
#include "kvscope/CheckpointWriter.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FaultSpec.hpp"
#include "kvscope/SafetensorsWriter.hpp"
#include "kvscope/TraceFile.hpp"

using namespace kvscope;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {
fs::path traceFileDir() {
  static const fs::path d = test::freshDir("trace-file");
  fs::create_directories(d);
  return d;
}
Trace smallTrace(bool snapshots) {
  auto model = Model::load(test::hfModel("llama"));
  RequestSpec a, b;
  a.promptIds = {0, 34, 86, 69};
  a.maxNewTokens = 4;
  a.stopAtEos = false;
  b.promptIds = {0, 316, 284};
  b.maxNewTokens = 3;
  b.arrivalTick = 1;
  b.stopAtEos = false;
  b.policy.temperature = 0.8;
  b.policy.seed = 11;
  EngineOptions o;
  o.recordSnapshots = snapshots;
  return Engine(model).run({a, b}, o);
}
std::string errorOf(const std::string& path, std::string* field = nullptr) {
  try {
    TraceFile::read(path);
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), path);
    if (field) *field = e.field();
    return e.what();
  }
  ADD_FAILURE() << "no InputError for " << path;
  return "";
}
std::string fieldOf(const std::string& path) {
  std::string field;
  errorOf(path, &field);
  return field;
}

// A damaged copy of `in` in the test folder (test::rewriteTrace).
std::string rewrite(const std::string& in, const std::string& name, const std::function<void(json&)>& edit,
                    const std::vector<std::string>& drop = {}) {
  const auto out = (traceFileDir() / name).string();
  test::rewriteTrace(in, out, edit, drop);
  return out;
}
const std::string& writtenSmallTrace() {
  static const std::string path = [] {
    auto p = (traceFileDir() / "small.kvtrace").string();
    TraceFile::write(smallTrace(false), p, true);
    return p;
  }();
  return path;
}
size_t rawBytes(const Trace& t) {
  size_t floats = 0;
  for (const auto& s : t.steps) {
    floats += s.logits.data.size();
    for (const auto& l : s.layers) floats += l.keys.data.size() + l.values.data.size();
  }
  return floats * sizeof(float);
}
}  // namespace

TEST(TraceFile, RoundTripPreservesEveryField) {
  Trace t = smallTrace(false);
  auto path = (traceFileDir() / "rt.kvtrace").string();
  TraceFile::write(t, path, true);
  Trace back = TraceFile::read(path);
  EXPECT_EQ(back.formatVersion, TraceFile::kFormatVersion);
  EXPECT_EQ(back.requests, t.requests);
  EXPECT_EQ(back.model, t.model);
  ASSERT_EQ(back.steps.size(), t.steps.size());
  for (size_t i = 0; i < t.steps.size(); ++i) EXPECT_EQ(back.steps[i], t.steps[i]) << i;
  EXPECT_EQ(back, t);
}

TEST(TraceFile, RoundTripWithSnapshots) {
  Trace t = smallTrace(true);
  EXPECT_TRUE(t.hasSnapshots());
  auto path = (traceFileDir() / "snap.kvtrace").string();
  TraceFile::write(t, path, true);
  EXPECT_EQ(TraceFile::read(path), t);
}

TEST(TraceFile, VersionTwoPacksTensorsPerLayerAndTheStepTableAsColumns) {
  Trace t = smallTrace(false);
  auto file = SafetensorsFile::open(writtenSmallTrace());
  EXPECT_EQ(file->metadata().at("kvtrace_version"), "2");
  std::vector<std::string> want = {"checksums", "layer0.k", "layer0.v", "layer1.k", "layer1.v",
                                   "layer2.k",  "layer2.v", "logits"};
  EXPECT_EQ(file->names(), want);
  int64_t appended = 0;
  for (const auto& s : t.steps) appended += s.layers.at(1).keys.shape[1];
  EXPECT_EQ(file->entry("layer1.k").shape, (std::vector<int64_t>{2, appended, 16}));
  EXPECT_EQ(file->entry("logits").shape, (std::vector<int64_t>{static_cast<int64_t>(t.steps.size()), 1200}));
  EXPECT_EQ(file->entry("checksums").dtype, SafetensorsDtype::U64);
  json steps = json::parse(file->metadata().at("kvtrace"))["steps"];
  EXPECT_EQ(steps["count"], t.steps.size());
  EXPECT_EQ(steps["fed_ids"][0], t.steps[0].fedIds);
  EXPECT_EQ(steps["appended"][0], json({4, 4, 4}));
  EXPECT_FALSE(steps.contains("snapshot_lengths"));
}

TEST(TraceFile, SnapshotOnlyTraceDerivesAppendedRecords) {
  Trace t = smallTrace(true);
  Trace stripped = t;
  for (auto& s : stripped.steps)
    for (auto& l : s.layers) {
      l.keys = FloatTensor();
      l.values = FloatTensor();
    }
  auto path = (traceFileDir() / "snaponly.kvtrace").string();
  TraceFile::write(stripped, path, true);
  EXPECT_FALSE(SafetensorsFile::open(path)->contains("layer0.k"));
  Trace back = TraceFile::read(path);
  for (size_t i = 0; i < t.steps.size(); ++i)
    for (size_t l = 0; l < t.steps[i].layers.size(); ++l) {
      EXPECT_EQ(back.steps[i].layers[l].keys, t.steps[i].layers[l].keys) << "step " << i << " layer " << l;
      EXPECT_EQ(back.steps[i].layers[l].values, t.steps[i].layers[l].values);
      EXPECT_EQ(back.steps[i].layers[l].cacheLength, t.steps[i].layers[l].cacheLength);
    }
}

TEST(TraceFile, StorageIsTheRawTensorsPlusLittleOnASmallModel) {
  // The demo checkpoint (3 layers, 2 KV heads, head size 16, vocabulary 512): each step
  // appends 768 bytes of K/V and a 2 KB logits row, so per-step metadata shows.
  const auto dir = traceFileDir() / "demo-model";
  CheckpointWriter(CheckpointSpec::demo()).write(dir.string(), true);
  auto model = Model::load(dir.string());
  RequestSpec r;
  r.promptIds = {1, 20, 30, 40, 50};
  r.maxNewTokens = 128;
  r.stopAtEos = false;
  Trace t = Engine(model).run({r}, EngineOptions{});
  ASSERT_EQ(t.requests[0].generated.size(), 128u);
  auto path = (traceFileDir() / "demo128.kvtrace").string();
  TraceFile::write(t, path, true);
  const double ratio = static_cast<double>(fs::file_size(path)) / static_cast<double>(rawBytes(t));
  EXPECT_LT(ratio, 1.1) << "file " << fs::file_size(path) << " bytes for " << rawBytes(t) << " raw bytes";
  EXPECT_EQ(TraceFile::read(path), t);
}

TEST(TraceFile, RefusesToOverwriteByDefault) {
  auto path = (traceFileDir() / "exists.kvtrace").string();
  std::ofstream(path) << "keep me";
  EXPECT_THROW(TraceFile::write(smallTrace(false), path), InputError);
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  EXPECT_EQ(s, "keep me");
}

TEST(TraceFile, TruncatedTraceIsAClearError) {
  auto path = (traceFileDir() / "trunc.kvtrace").string();
  fs::copy_file(writtenSmallTrace(), path, fs::copy_options::overwrite_existing);
  fs::resize_file(path, fs::file_size(path) / 2);
  auto msg = errorOf(path);
  EXPECT_NE(msg.find("beyond the data buffer"), std::string::npos) << msg;
}

TEST(TraceFile, WrongFormatAndVersionAreClearErrors) {
  auto dir = traceFileDir();
  SafetensorsWriter plain;
  plain.addInt64("x", {1}, {1});
  plain.write((dir / "plain.safetensors").string());
  EXPECT_NE(errorOf((dir / "plain.safetensors").string()).find("__metadata__.format"), std::string::npos);
  SafetensorsWriter v9;
  v9.setMetadata("format", "kvtrace");
  v9.setMetadata("kvtrace_version", "9");
  v9.setMetadata("kvtrace", "{}");
  v9.write((dir / "v9.kvtrace").string());
  EXPECT_NE(errorOf((dir / "v9.kvtrace").string()).find("version 9 is not supported"), std::string::npos);
  // A document whose version contradicts the container's.
  auto mixed = rewrite(writtenSmallTrace(), "mixed.kvtrace", [](json& d) { d["version"] = 1; });
  EXPECT_EQ(fieldOf(mixed), "version");
}

TEST(TraceFile, MissingTensorAndInconsistentFieldsNameTheField) {
  const std::string& good = writtenSmallTrace();
  // A step that chose a token without a logits row.
  EXPECT_EQ(fieldOf(rewrite(good, "nologits.kvtrace", [](json& d) { d["steps"]["logits_row"][2] = -1; })),
            "steps.logits_row[2]");
  EXPECT_EQ(fieldOf(rewrite(good, "rowrange.kvtrace", [](json& d) { d["steps"]["logits_row"][2] = 99; })),
            "steps.logits_row[2]");
  EXPECT_EQ(fieldOf(rewrite(good, "dropped.kvtrace", nullptr, {"logits"})), "logits");
  // Positions that do not match the fed tokens; a column of the wrong length; a bad entry.
  EXPECT_EQ(fieldOf(rewrite(good, "badpos.kvtrace", [](json& d) { d["steps"]["positions"][1].push_back(99); })),
            "steps.positions[1]");
  EXPECT_EQ(fieldOf(rewrite(good, "short.kvtrace", [](json& d) { d["steps"]["chosen"].erase(0); })), "steps.chosen");
  EXPECT_EQ(fieldOf(rewrite(good, "entry.kvtrace", [](json& d) { d["steps"]["tick"][3] = "soon"; })),
            "steps.tick[3]");
  EXPECT_EQ(fieldOf(rewrite(good, "req.kvtrace", [](json& d) { d["steps"]["request"][3] = 7; })),
            "steps.request[3]");
  EXPECT_EQ(fieldOf(rewrite(good, "nocount.kvtrace", [](json& d) { d["steps"].erase("count"); })), "steps.count");
  EXPECT_EQ(fieldOf(rewrite(good, "layers.kvtrace", [](json& d) { d["steps"]["appended"][0] = {4, 4}; })),
            "steps.appended[0]");
  // Column counts that no longer add up to the packed tensor (records cut off).
  auto grown = rewrite(good, "grown.kvtrace", [](json& d) { d["steps"]["appended"][0][1] = 5; });
  EXPECT_EQ(fieldOf(grown), "layer1.k");
  EXPECT_NE(errorOf(grown).find("truncated or inconsistent"), std::string::npos);
  EXPECT_EQ(fieldOf(rewrite(good, "nok.kvtrace", nullptr, {"layer2.k", "layer2.v"})), "layer2.k");
  EXPECT_EQ(fieldOf(rewrite(good, "nov.kvtrace", nullptr, {"layer0.v"})), "layer0.v");
  // Shapes that contradict the model block.
  EXPECT_EQ(fieldOf(rewrite(good, "heads.kvtrace", [](json& d) { d["model"]["num_kv_heads"] = 3; })), "layer0.k");
  EXPECT_EQ(
      fieldOf(rewrite(good, "vocab.kvtrace", [](json& d) { d["model"]["vocab_size"] = 1300; })),
      "logits");
  EXPECT_EQ(fieldOf(rewrite(good, "sums.kvtrace", [](json& d) { d["model"]["num_layers"] = 2; })),
            "steps.appended[0]");
  EXPECT_EQ(fieldOf(rewrite(good, "sumrow.kvtrace", [](json& d) { d["steps"]["checksum_row"][0] = 50; })),
            "steps.checksum_row[0]");
}

// Traces written before version 2 stay readable: the committed files were written by the
// version 1 writers (tests/fixtures/traces-v1/README.md).
TEST(TraceFile, ReadsVersionOneTraces) {
  const auto v1path = test::fixture("traces-v1/llama-engine-snapshots.kvtrace");
  Trace v1 = TraceFile::read(v1path);
  EXPECT_EQ(v1.formatVersion, 1);
  ASSERT_EQ(v1.steps.size(), 8u);
  EXPECT_TRUE(v1.hasSnapshots());
  // The same run again (the fixture's requests and fault) agrees record by record.
  std::vector<RequestSpec> specs;
  for (const auto& r : v1.requests) {
    RequestSpec s;
    s.promptIds = r.promptIds;
    s.maxNewTokens = r.maxNewTokens;
    s.arrivalTick = r.arrivalTick;
    s.policy = r.policy;
    specs.push_back(s);
  }
  EngineOptions o;
  o.recordSnapshots = true;
  for (const auto& f : v1.faults) o.faults.push_back(FaultSpec::parse(f));
  Trace again = Engine(Model::load(test::hfModel("llama"))).run(specs, o);
  ASSERT_EQ(again.steps.size(), v1.steps.size());
  for (size_t r = 0; r < v1.requests.size(); ++r) EXPECT_EQ(again.requests[r].generated, v1.requests[r].generated);
  for (size_t i = 0; i < v1.steps.size(); ++i) {
    const auto &a = again.steps[i], &b = v1.steps[i];
    EXPECT_EQ(a.fedIds, b.fedIds);
    EXPECT_EQ(a.positions, b.positions);
    EXPECT_TRUE(test::closeTo(b.logits, a.logits, 1e-4f)) << "step " << i;
    ASSERT_EQ(a.layers.size(), b.layers.size());
    for (size_t l = 0; l < a.layers.size(); ++l) {
      EXPECT_EQ(b.layers[l].cacheLength, a.layers[l].cacheLength) << "step " << i << " layer " << l;
      EXPECT_TRUE(test::closeTo(b.layers[l].keys, a.layers[l].keys, 1e-4f)) << "step " << i << " layer " << l;
      EXPECT_TRUE(test::closeTo(b.layers[l].snapshotValues, a.layers[l].snapshotValues, 1e-4f));
      EXPECT_TRUE(b.layers[l].keyChecksum.has_value());
    }
  }
  // The duplicate append at layer 1, step 2 is in the records as written.
  for (const auto& s : v1.steps)
    EXPECT_EQ(s.layers[1].keys.shape[1], (s.step == 2 ? 2 : 1) * s.layers[0].keys.shape[1]) << s;
  // Rewritten as version 2, nothing changes but the version.
  auto path = (traceFileDir() / "v1-as-v2.kvtrace").string();
  TraceFile::write(v1, path, true);
  Trace v2 = TraceFile::read(path);
  EXPECT_EQ(v2.formatVersion, 2);
  v2.formatVersion = 1;
  EXPECT_EQ(v2, v1);
}

TEST(TraceFile, VersionOneErrorsStillNameTheFields) {
  const auto v1path = test::fixture("traces-v1/llama-engine-snapshots.kvtrace");
  EXPECT_EQ(fieldOf(rewrite(v1path, "v1-nologits.kvtrace", nullptr, {"step2.logits"})), "step2.logits");
  EXPECT_EQ(fieldOf(rewrite(v1path, "v1-pos.kvtrace", [](json& d) { d["steps"][1]["positions"].push_back(9); })),
            "steps[1].positions");
  EXPECT_EQ(fieldOf(rewrite(v1path, "v1-heads.kvtrace", [](json& d) { d["model"]["num_kv_heads"] = 3; })),
            "step0.layer0.cache_k");
}

// The speculative and prefix-cache columns are version 2's: a version 1 step that carries
// them (even nonsense values) reads exactly as without them (kvscope_trace does the same).
TEST(TraceFile, VersionOneIgnoresTheVersionTwoStepColumns) {
  const auto v1path = test::fixture("traces-v1/llama-engine-snapshots.kvtrace");
  const Trace plain = TraceFile::read(v1path);
  const Trace edited = TraceFile::read(rewrite(v1path, "v1-reuse.kvtrace", [](json& d) {
    for (auto& s : d["steps"]) {
      s["reused_count"] = 1000000;
      s["reused_from"] = 7;
      s["reused_blocks"] = "abc";
      s["draft_count"] = 99;
      s["accepted_count"] = -1;
    }
  }));
  ASSERT_EQ(edited.steps.size(), plain.steps.size());
  for (const auto& s : edited.steps) {
    EXPECT_EQ(s.reusedCount, 0);
    EXPECT_EQ(s.reusedFrom, -1);
    EXPECT_TRUE(s.reusedBlocks.empty());
    EXPECT_EQ(s.draftCount, 0);
  }
  EXPECT_EQ(edited, plain);
}
