// A trace that holds some of the model's layers (recorded_layers, docs/trace-format.md): it
// is written and read back with its records on the right model layers, the reader refuses
// a bad subset naming the file and the field, and the audit checks the layers present
// against the full reference and says "not checked" for the others, never ok.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ScratchDir.hpp"
#include "TestSupport.hpp"
#include "kvscope/AuditJob.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FaultSpec.hpp"
#include "kvscope/Inspection.hpp"
#include "kvscope/TraceFile.hpp"
#include "kvscope/TraceMinimizer.hpp"

using namespace kvscope;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path subsetDir() { return test::scratchDir("layer-subset"); }

Trace runSubset(const std::vector<std::string>& faults, bool snapshots = false) {
  auto model = Model::load(test::hfModel("llama"));
  RequestSpec a;
  a.promptIds = {0, 34, 86, 69};
  a.maxNewTokens = 5;
  a.stopAtEos = false;
  EngineOptions o;
  o.recordSnapshots = snapshots;
  for (const auto& f : faults) o.faults.push_back(FaultSpec::parse(f));
  return Engine(model).run({a}, o);
}

Trace onlyLayers(const Trace& t, std::vector<int64_t> layers) {
  TraceCut cut;
  cut.layers = std::move(layers);
  return cutTrace(t, cut);
}

std::string written(const Trace& t, const std::string& name) {
  const auto p = (subsetDir() / name).string();
  TraceFile::write(t, p, true);
  return p;
}

// The field of the InputError reading `path` throws (and that it names the file).
std::string refusedField(const std::string& path, std::string* what = nullptr) {
  try {
    TraceFile::read(path);
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), path);
    if (what) *what = e.what();
    return e.field();
  }
  ADD_FAILURE() << path << " was read without an error";
  return "";
}

bool hasCheck(const AuditReport& r, const std::string& text) {
  for (const auto& st : r.stages)
    for (const auto& c : st.checks)
      if (c.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(TraceLayerSubset, RoundTripKeepsRecordsOnTheirModelLayers) {
  const Trace full = runSubset({}, true);
  const Trace sub = onlyLayers(full, {1, 2});
  EXPECT_EQ(sub.recordedLayers, (std::vector<int64_t>{1, 2}));
  EXPECT_FALSE(sub.hasLayer(0));
  EXPECT_TRUE(sub.hasLayer(2));
  EXPECT_EQ(describeTraceLayers(sub), "layers 1, 2 of 3");
  const auto path = written(sub, "sub.kvtrace");
  const Trace back = TraceFile::read(path);
  EXPECT_EQ(back, sub);
  ASSERT_EQ(back.steps.size(), full.steps.size());
  for (size_t i = 0; i < back.steps.size(); ++i) {
    ASSERT_EQ(back.steps[i].layers.size(), 3u);
    EXPECT_TRUE(back.steps[i].layers[0].keys.empty());
    EXPECT_EQ(back.steps[i].layers[2].keys, full.steps[i].layers[2].keys);
    EXPECT_EQ(back.steps[i].layers[1].snapshotValues, full.steps[i].layers[1].snapshotValues);
    EXPECT_EQ(back.steps[i].layers[1].keyChecksum, full.steps[i].layers[1].keyChecksum);
  }
  // The file names its tensors by model layer and has per-layer entries for the subset only.
  auto file = SafetensorsFile::open(path);
  EXPECT_FALSE(file->contains("layer0.k"));
  EXPECT_TRUE(file->contains("layer2.k"));
  const json doc = json::parse(file->metadata().at("kvtrace"));
  EXPECT_EQ(doc["recorded_layers"], json::array({1, 2}));
  EXPECT_EQ(doc["steps"]["appended"][0].size(), 2u);
  EXPECT_EQ(file->entry("checksums").shape[1], 2);
  // A trace of every layer is written as before: no field.
  const json fullDoc =
      json::parse(SafetensorsFile::open(written(full, "full.kvtrace"))->metadata().at("kvtrace"));
  EXPECT_FALSE(fullDoc.contains("recorded_layers"));
}

TEST(TraceLayerSubset, BadSubsetsAreRefusedNamingFileAndField) {
  const auto good = written(onlyLayers(runSubset({}), {1}), "good.kvtrace");
  auto bad = [&](const std::string& name, const std::function<void(json&)>& edit,
                 const std::vector<std::string>& drop = {}) {
    const auto p = (subsetDir() / name).string();
    test::rewriteTrace(good, p, edit, drop);
    return p;
  };
  std::string what;
  EXPECT_EQ(refusedField(
                bad("empty.kvtrace", [](json& d) { d["recorded_layers"] = json::array(); }), &what),
            "recorded_layers");
  EXPECT_NE(what.find("one or more"), std::string::npos) << what;
  EXPECT_EQ(refusedField(bad("type.kvtrace", [](json& d) { d["recorded_layers"] = "1"; })),
            "recorded_layers");
  EXPECT_EQ(refusedField(bad("range.kvtrace", [](json& d) { d["recorded_layers"] = {3}; }), &what),
            "recorded_layers[0]");
  EXPECT_NE(what.find("model.num_layers 3"), std::string::npos) << what;
  EXPECT_EQ(refusedField(bad("negative.kvtrace", [](json& d) { d["recorded_layers"] = {-1}; })),
            "recorded_layers[0]");
  // Two entries: the step columns then name one entry too few; order is checked first.
  EXPECT_EQ(refusedField(bad("order.kvtrace",
                             [](json& d) {
                               d["recorded_layers"] = {1, 0};
                             }),
                         &what),
            "recorded_layers[1]");
  EXPECT_NE(what.find("strictly increasing"), std::string::npos) << what;
  EXPECT_EQ(refusedField(bad("twice.kvtrace",
                             [](json& d) {
                               d["recorded_layers"] = {1, 1};
                             })),
            "recorded_layers[1]");
  EXPECT_EQ(refusedField(bad("count.kvtrace",
                             [](json& d) {
                               d["recorded_layers"] = {0, 1};
                             })),
            "steps.appended[0]");
  // The records of layer 1 labelled as layer 0's.
  EXPECT_EQ(refusedField(bad("other.kvtrace", [](json& d) { d["recorded_layers"] = {0}; }), &what),
            "layer1.k");
  EXPECT_NE(what.find("not in recorded_layers"), std::string::npos) << what;
  // Without the field, the per-layer entries are one per model layer again.
  EXPECT_EQ(refusedField(bad("absent.kvtrace", [](json& d) { d.erase("recorded_layers"); })),
            "steps.appended[0]");
}

TEST(TraceLayerSubset, AuditChecksThePresentLayersAndNamesTheOthers) {
  auto model = Model::load(test::hfModel("llama"));
  const Trace sub = TraceFile::read(written(onlyLayers(runSubset({}), {2}), "clean-sub.kvtrace"));
  const AuditReport clean = Auditor::audit(*model, sub).report;
  EXPECT_TRUE(clean.clean()) << clean.toText();
  EXPECT_TRUE(hasCheck(clean, "not checked: layer 0 not in the trace (minimized)"));
  EXPECT_TRUE(hasCheck(clean, "not checked: layer 1 not in the trace (minimized)"));
  EXPECT_FALSE(hasCheck(clean, "layer 2 not in the trace"));
  EXPECT_TRUE(hasCheck(clean, "ok: one K and one V record set per layer (layer 2 of 3)"));
  // A fault on a present layer is found on it, against the full reference.
  const Trace faulty = onlyLayers(runSubset({"wrong_layer:layer=2,source=1,step=2"}), {2});
  const AuditReport found = Auditor::audit(*model, faulty).report;
  const auto target = minimizeTarget(found);
  ASSERT_TRUE(target) << found.toText();
  EXPECT_EQ(target->finding.id, "wrong_layer");
  EXPECT_EQ(target->finding.layer, 2);
  EXPECT_EQ(target->finding.step, 2);
  // A fault on an absent layer cannot be seen in the records: no record check says ok for it.
  const AuditReport hidden =
      Auditor::audit(*model, onlyLayers(runSubset({"wrong_layer:layer=2,source=1,step=2"}), {0, 1}))
          .report;
  EXPECT_TRUE(hasCheck(hidden, "not checked: layer 2 not in the trace (minimized)"));
}

TEST(TraceLayerSubset, TraceAuditsNeedTheSameLayersOnBothSides) {
  const Trace t = runSubset({});
  const AuditResult same = Auditor::auditTraces(onlyLayers(t, {1}), onlyLayers(t, {1}));
  EXPECT_TRUE(same.report.clean()) << same.report.toText();
  const AuditResult differ = Auditor::auditTraces(t, onlyLayers(t, {1}));
  EXPECT_FALSE(differ.report.clean());
  ASSERT_FALSE(differ.report.findings.empty());
  EXPECT_EQ(differ.report.findings.front().id, "reference");
  EXPECT_NE(differ.report.findings.front().explanation.find("hold different layers"),
            std::string::npos)
      << differ.report.findings.front().explanation;
}

TEST(TraceLayerSubset, InspectorShowsEveryLayerOfAMinimizedAudit) {
  // What the GUI does with a minimized trace opened again: every step, layer and kind is
  // viewable; an absent layer has no cached side and no difference numbers.
  AuditJobSpec spec;
  spec.modelDir = test::hfModel("llama");
  spec.traceFile = written(onlyLayers(runSubset({"wrong_layer:layer=2,source=1,step=2"}), {2}),
                           "inspect.kvtrace");
  auto out = std::make_shared<const AuditJobOutput>(runAuditJob(spec));
  Inspector inspector(out);
  EXPECT_EQ(inspector.layers(), 3);
  for (int64_t step : inspector.steps(0))
    for (int64_t layer = 0; layer < 3; ++layer)
      for (KvKind kind : {KvKind::Keys, KvKind::Values}) {
        InspectionPoint p;
        p.request = 0;
        p.step = step;
        p.layer = layer;
        p.kind = kind;
        p.autoHead = true;
        const StepView v = inspector.view(p);
        EXPECT_EQ(v.point.layer, layer);
        if (layer < 2) {
          EXPECT_TRUE(v.absDiff.empty()) << "step " << step << " layer " << layer;
        }
        ASSERT_EQ(v.layerMaxDiff.size(), 3u);
        EXPECT_TRUE(std::isnan(v.layerMaxDiff[0]));
      }
}
