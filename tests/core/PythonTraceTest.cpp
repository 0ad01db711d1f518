// The Python side of the trace format (tools/kvtrace.py) against the C++ reader and
// writer: traces written by numpy read in C++ with the expected values, C++ traces survive a
// Python read + rewrite unchanged, and Python full-snapshot traces get their appended
// records derived. Skipped when /usr/bin/python3 or its numpy is missing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "PythonTools.hpp"
#include "TestSupport.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/TraceFile.hpp"

using namespace kvscope;
using namespace kvscope::test;
namespace fs = std::filesystem;

namespace {


// tools/make_example_trace.py's formulas.
float exampleKey(int64_t l, int64_t h, int64_t c, int64_t j, uint64_t version) {
  return static_cast<float>(1000 * l + 100 * h + c) + static_cast<float>(j) / 32.0f +
         static_cast<float>(version) / 2.0f;
}

struct ExampleStep {
  int64_t request, step, tick;
  std::vector<int64_t> fed, positions;
  int64_t chosen;
  uint64_t version;
  std::vector<std::string> events;
  uint64_t drawsBefore, drawsAfter;
  int64_t cacheBegin;  // first cache column the step appended
};

const std::vector<ExampleStep>& exampleSteps() {
  static const std::vector<ExampleStep> steps = {
      {0, 0, 0, {0, 34, 86}, {0, 1, 2}, 422, 0, {"arrival"}, 0, 0, 0},
      {1, 0, 1, {0, 316, 284, 7}, {0, 1, 2, 3}, 5, 0, {"arrival"}, 0, 1, 0},
      {0, 1, 2, {422}, {3}, 623, 0, {}, 0, 0, 3},
      {1, 1, 3, {0, 316, 284, 7, 5}, {0, 1, 2, 3, 4}, 6, 1, {"cache_reset"}, 1, 2, 0},
      {0, 2, 4, {0, 34, 86, 422, 623}, {0, 1, 2, 3, 4}, 17, 1, {"cache_reset"}, 0, 0, 0},
  };
  return steps;
}

::testing::AssertionResult matchesFormula(const FloatTensor& t, int64_t l, int64_t begin, int64_t count,
                                          uint64_t version, float sign) {
  const std::vector<int64_t> want{2, count, 16};
  if (t.shape != want) return ::testing::AssertionFailure() << "shape " << t.shapeString();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t c = 0; c < count; ++c)
      for (int64_t j = 0; j < 16; ++j) {
        const float got = t.data[static_cast<size_t>((h * count + c) * 16 + j)];
        const float exp = sign * exampleKey(l, h, begin + c, j, version);
        if (got != exp)
          return ::testing::AssertionFailure() << "layer " << l << " [" << h << ", " << c << ", " << j
                                               << "] = " << got << ", expected " << exp;
      }
  return ::testing::AssertionSuccess();
}

void checkExample(const Trace& t, bool snapshots) {
  EXPECT_EQ(t.engine, "make_example_trace.py");
  EXPECT_EQ(t.mode, "cached");
  EXPECT_EQ(t.model.architecture, "llama");
  EXPECT_EQ(t.model.numLayers, 3);
  EXPECT_EQ(t.model.numHeads, 4);
  EXPECT_EQ(t.model.numKvHeads, 2);
  EXPECT_EQ(t.model.headDim, 16);
  EXPECT_EQ(t.model.vocabSize, 1200);
  EXPECT_EQ(t.model.maxPositions, 128);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.requests[0].promptIds, (std::vector<int64_t>{0, 34, 86}));
  EXPECT_EQ(t.requests[0].promptText, "Audit");
  EXPECT_EQ(t.requests[0].generated, (std::vector<int64_t>{422, 623, 17}));
  EXPECT_TRUE(t.requests[0].policy.greedy());
  EXPECT_EQ(t.requests[1].generated, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(t.requests[1].policy.temperature, 0.8);
  EXPECT_EQ(t.requests[1].policy.topK, std::optional<int64_t>(50));
  EXPECT_FALSE(t.requests[1].policy.topP.has_value());
  EXPECT_EQ(t.requests[1].policy.seed, 11u);
  EXPECT_EQ(t.requests[1].arrivalTick, 1);
  EXPECT_EQ(t.requests[1].stopReason, "max_new_tokens");
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].kind, "weight_update");
  EXPECT_EQ(t.events[0].tensor, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(t.events[0].scale, 0.5);
  EXPECT_EQ(t.events[0].weightsVersion, 1u);
  EXPECT_EQ(t.hasSnapshots(), snapshots);
  const auto& want = exampleSteps();
  ASSERT_EQ(t.steps.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    const TraceStep& s = t.steps[i];
    const ExampleStep& w = want[i];
    EXPECT_EQ(s.request, w.request);
    EXPECT_EQ(s.step, w.step);
    EXPECT_EQ(s.tick, w.tick);
    EXPECT_EQ(s.slot, w.request);
    EXPECT_EQ(s.fedIds, w.fed);
    EXPECT_EQ(s.positions, w.positions);
    EXPECT_EQ(s.chosenToken, w.chosen);
    EXPECT_EQ(s.weightsVersion, w.version);
    EXPECT_EQ(s.events, w.events);
    EXPECT_EQ(s.rngDrawsBefore, w.drawsBefore);
    EXPECT_EQ(s.rngDrawsAfter, w.drawsAfter);
    ASSERT_EQ(s.logits.shape, (std::vector<int64_t>{1200}));
    EXPECT_EQ(s.logits.data[static_cast<size_t>(w.chosen)], 10.0f + static_cast<float>(i));
    EXPECT_EQ(s.logits.data[100], -0.75f);
    EXPECT_EQ(s.logits.data[1199], -static_cast<float>(1199 % 97) / 4.0f);
    ASSERT_EQ(s.layers.size(), 3u);
    const auto count = static_cast<int64_t>(w.fed.size());
    for (int64_t l = 0; l < 3; ++l) {
      const auto& rec = s.layers[static_cast<size_t>(l)];
      EXPECT_EQ(rec.cacheLength, w.cacheBegin + count);
      EXPECT_TRUE(matchesFormula(rec.keys, l, w.cacheBegin, count, w.version, 1.0f));
      EXPECT_TRUE(matchesFormula(rec.values, l, w.cacheBegin, count, w.version, -1.0f));
      if (snapshots) {
        EXPECT_TRUE(matchesFormula(rec.snapshotKeys, l, 0, w.cacheBegin + count, w.version, 1.0f));
        EXPECT_TRUE(matchesFormula(rec.snapshotValues, l, 0, w.cacheBegin + count, w.version, -1.0f));
      } else {
        EXPECT_TRUE(rec.snapshotKeys.empty());
      }
    }
  }
}

Trace engineTrace(bool snapshots) {
  auto model = Model::load(test::hfModel("llama"));
  RequestSpec a, b, c;
  a.promptIds = {0, 34, 86, 69};
  a.promptText = "Audit \xc3\xa9";  // non-ASCII survives the Python JSON round trip
  a.maxNewTokens = 4;
  a.stopAtEos = false;
  b.promptIds = {0, 316, 284};
  b.maxNewTokens = 3;
  b.arrivalTick = 1;
  b.stopAtEos = false;
  b.policy.temperature = 0.8;
  b.policy.topP = 0.9;
  b.policy.seed = 11;
  c.promptIds = {0, 5};  // left-padded against a: fed_mask
  c.maxNewTokens = 2;
  c.batchGroup = 0;
  c.stopAtEos = false;
  a.batchGroup = 0;
  EngineOptions o;
  o.recordSnapshots = snapshots;
  o.weightUpdates.push_back({2, "model.layers.0.self_attn.k_proj.weight", 0.05f, 3});
  return Engine(model).run({a, b, c}, o);
}

}  // namespace

TEST(PythonTrace, NumpyWrittenTraceReadsInCpp) {
  SKIP_WITHOUT_PYTHON();
  const auto path = (tempDir() / "python-example.kvtrace").string();
  auto r = python("make_example_trace.py", quote(path));
  ASSERT_EQ(r.status, 0) << r.output;
  Trace t = TraceFile::read(path);
  checkExample(t, false);
  // The Python info command reads it too.
  r = python("kvtrace.py", "info " + quote(path));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("requests: 2, steps: 5"), std::string::npos) << r.output;
}

TEST(PythonTrace, NumpyTraceWithSnapshotsReadsInCpp) {
  SKIP_WITHOUT_PYTHON();
  const auto path = (tempDir() / "python-snapshots.kvtrace").string();
  auto r = python("make_example_trace.py", quote(path) + " --snapshots");
  ASSERT_EQ(r.status, 0) << r.output;
  checkExample(TraceFile::read(path), true);
}

TEST(PythonTrace, CppTraceSurvivesPythonRoundTrip) {
  SKIP_WITHOUT_PYTHON();
  for (bool snapshots : {false, true}) {
    SCOPED_TRACE(snapshots ? "with snapshots" : "appended records only");
    Trace original = engineTrace(snapshots);
    ASSERT_FALSE(original.events.empty());
    ASSERT_TRUE(std::any_of(original.steps.begin(), original.steps.end(),
                            [](const TraceStep& s) { return !s.fedMask.empty(); }));
    ASSERT_TRUE(original.steps[0].layers[0].keyChecksum.has_value());
    const auto dir = tempDir();
    const auto in = (dir / (snapshots ? "cpp-snap.kvtrace" : "cpp.kvtrace")).string();
    const auto out = (dir / (snapshots ? "cpp-snap-py.kvtrace" : "cpp-py.kvtrace")).string();
    TraceFile::write(original, in, true);
    fs::remove(out);
    auto r = python("kvtrace.py", "roundtrip " + quote(in) + " " + quote(out));
    ASSERT_EQ(r.status, 0) << r.output;
    Trace back = TraceFile::read(out);
    EXPECT_EQ(back.model, original.model);
    EXPECT_EQ(back.requests, original.requests);
    EXPECT_EQ(back.events, original.events);
    ASSERT_EQ(back.steps.size(), original.steps.size());
    for (size_t i = 0; i < back.steps.size(); ++i) EXPECT_EQ(back.steps[i], original.steps[i]) << "step " << i;
    EXPECT_TRUE(back == original);
  }
}

TEST(PythonTrace, FingerprintMatchesCheckpoint) {
  SKIP_WITHOUT_PYTHON();
  auto model = Model::load(test::hfModel("llama"));
  auto r = python("kvtrace.py", "fingerprint " + quote(test::hfModel("llama")));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, model->fingerprint() + "\n");
}

TEST(PythonTrace, FullSnapshotTraceFromPythonDerivesAppendedRecords) {
  SKIP_WITHOUT_PYTHON();
  const auto path = (tempDir() / "python-snaponly.kvtrace").string();
  auto r = python("make_example_trace.py", quote(path) + " --snapshots-only");
  ASSERT_EQ(r.status, 0) << r.output;
  // The file really holds no appended records...
  auto file = SafetensorsFile::open(path);
  for (const auto& name : file->names())
    EXPECT_TRUE(name.find(".cache_") != std::string::npos || name == "logits" || name == "checksums") << name;
  // ...and the reader derives them (including across the cache resets).
  checkExample(TraceFile::read(path), true);
}

TEST(PythonTrace, PythonRejectsWhatCppRejects) {
  SKIP_WITHOUT_PYTHON();
  const auto dir = tempDir();
  const auto path = (dir / "truncated.kvtrace").string();
  TraceFile::write(engineTrace(false), path, true);
  fs::resize_file(path, fs::file_size(path) / 2);
  EXPECT_THROW(TraceFile::read(path), InputError);
  auto r = python("kvtrace.py", "info " + quote(path));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("beyond the data buffer"), std::string::npos) << r.output;
}

// Traces the version 1 writers produced (tests/fixtures/traces-v1) read with the same
// values in C++, and tools/kvtrace.py rewrites them as version 2 without a change.
TEST(PythonTrace, VersionOneExampleTracesStillRead) {
  Trace appended = TraceFile::read(test::fixture("traces-v1/example.kvtrace"));
  EXPECT_EQ(appended.formatVersion, 1);
  checkExample(appended, false);
  Trace snapshotsOnly = TraceFile::read(test::fixture("traces-v1/example-snapshots-only.kvtrace"));
  checkExample(snapshotsOnly, true);
}

TEST(PythonTrace, PythonRewritesVersionOneAsVersionTwo) {
  SKIP_WITHOUT_PYTHON();
  for (const char* name : {"example.kvtrace", "example-snapshots-only.kvtrace", "llama-engine-snapshots.kvtrace"}) {
    SCOPED_TRACE(name);
    const auto in = test::fixture(std::string("traces-v1/") + name);
    const auto out = (tempDir() / (std::string("v2-") + name)).string();
    fs::remove(out);
    auto r = python("kvtrace.py", "roundtrip " + quote(in) + " " + quote(out));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(SafetensorsFile::open(out)->metadata().at("kvtrace_version"), "2");
    Trace v1 = TraceFile::read(in);
    Trace v2 = TraceFile::read(out);
    EXPECT_EQ(v2.formatVersion, 2);
    v2.formatVersion = 1;
    ASSERT_EQ(v2.steps.size(), v1.steps.size());
    for (size_t i = 0; i < v1.steps.size(); ++i) EXPECT_EQ(v2.steps[i], v1.steps[i]) << "step " << i;
    EXPECT_TRUE(v2 == v1);
  }
}
