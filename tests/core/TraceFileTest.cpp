#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "TestSupport.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/SafetensorsWriter.hpp"
#include "kvscope/TraceFile.hpp"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {
fs::path tempDir() {
  auto d = fs::temp_directory_path() / ("kvscope-trace-" + std::to_string(::getpid()));
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
std::string errorOf(const std::string& path) {
  try {
    TraceFile::read(path);
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), path);
    return e.what();
  }
  ADD_FAILURE() << "no InputError";
  return "";
}
}  // namespace

TEST(TraceFile, RoundTripPreservesEveryField) {
  Trace t = smallTrace(false);
  auto path = (tempDir() / "rt.kvtrace").string();
  TraceFile::write(t, path, true);
  Trace back = TraceFile::read(path);
  EXPECT_EQ(back.requests, t.requests);
  EXPECT_EQ(back.model, t.model);
  ASSERT_EQ(back.steps.size(), t.steps.size());
  for (size_t i = 0; i < t.steps.size(); ++i) EXPECT_EQ(back.steps[i], t.steps[i]) << i;
  EXPECT_EQ(back, t);
}

TEST(TraceFile, RoundTripWithSnapshots) {
  Trace t = smallTrace(true);
  EXPECT_TRUE(t.hasSnapshots());
  auto path = (tempDir() / "snap.kvtrace").string();
  TraceFile::write(t, path, true);
  EXPECT_EQ(TraceFile::read(path), t);
}

TEST(TraceFile, SnapshotOnlyTraceDerivesAppendedRecords) {
  Trace t = smallTrace(true);
  Trace stripped = t;
  for (auto& s : stripped.steps)
    for (auto& l : s.layers) {
      l.keys = FloatTensor();
      l.values = FloatTensor();
    }
  auto path = (tempDir() / "snaponly.kvtrace").string();
  TraceFile::write(stripped, path, true);
  Trace back = TraceFile::read(path);
  for (size_t i = 0; i < t.steps.size(); ++i)
    for (size_t l = 0; l < t.steps[i].layers.size(); ++l) {
      EXPECT_EQ(back.steps[i].layers[l].keys, t.steps[i].layers[l].keys) << "step " << i << " layer " << l;
      EXPECT_EQ(back.steps[i].layers[l].values, t.steps[i].layers[l].values);
    }
}

TEST(TraceFile, StorageGrowsLinearlyWithoutSnapshots) {
  Trace t = smallTrace(false);
  size_t floats = 0;
  for (const auto& s : t.steps) {
    floats += s.logits.data.size();
    for (const auto& l : s.layers) floats += l.keys.data.size() + l.values.data.size();
  }
  auto path = (tempDir() / "size.kvtrace").string();
  TraceFile::write(t, path, true);
  const double ratio = static_cast<double>(fs::file_size(path)) / static_cast<double>(floats * 4);
  EXPECT_LT(ratio, 1.5) << "file " << fs::file_size(path) << " bytes for " << floats * 4 << " raw bytes";
}

TEST(TraceFile, RefusesToOverwriteByDefault) {
  auto path = (tempDir() / "exists.kvtrace").string();
  std::ofstream(path) << "keep me";
  EXPECT_THROW(TraceFile::write(smallTrace(false), path), InputError);
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  EXPECT_EQ(s, "keep me");
}

TEST(TraceFile, TruncatedTraceIsAClearError) {
  auto path = (tempDir() / "trunc.kvtrace").string();
  TraceFile::write(smallTrace(false), path, true);
  auto size = fs::file_size(path);
  fs::resize_file(path, size / 2);
  auto msg = errorOf(path);
  EXPECT_NE(msg.find("beyond the data buffer"), std::string::npos) << msg;
}

TEST(TraceFile, WrongFormatAndVersionAreClearErrors) {
  auto dir = tempDir();
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
}

TEST(TraceFile, MissingTensorAndInconsistentFieldsNameTheField) {
  auto dir = tempDir();
  Trace t = smallTrace(false);
  // A step whose logits tensor is absent although it chose a token.
  Trace noLogits = t;
  noLogits.steps[2].logits = FloatTensor();
  TraceFile::write(noLogits, (dir / "nologits.kvtrace").string(), true);
  EXPECT_NE(errorOf((dir / "nologits.kvtrace").string()).find("step2.logits"), std::string::npos);
  // Positions that do not match the fed tokens.
  Trace badPos = t;
  badPos.steps[1].positions.push_back(99);
  TraceFile::write(badPos, (dir / "badpos.kvtrace").string(), true);
  EXPECT_NE(errorOf((dir / "badpos.kvtrace").string()).find("steps[1].positions"), std::string::npos);
  // A K record whose head count contradicts the model block.
  Trace badShape = t;
  badShape.model.numKvHeads = 3;
  TraceFile::write(badShape, (dir / "badshape.kvtrace").string(), true);
  EXPECT_NE(errorOf((dir / "badshape.kvtrace").string()).find("step0.layer0.k"), std::string::npos);
}
