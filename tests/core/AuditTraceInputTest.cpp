// Trace-input mode: the audit on traces written by other engines' tooling
// (tools/kvtrace.py), including full-snapshot traces without appended records or
// checksums, and trace+trace mode without a model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "PythonTools.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/TraceFile.hpp"

using namespace kvscope;
using namespace kvscope::test;

namespace {

Trace engineTrace(const std::string& model, const std::vector<std::string>& faults, bool snapshots, bool uncached = false,
                  int requests = 2) {
  auto m = Model::load(hfModel(model));
  std::vector<RequestSpec> specs;
  const std::vector<std::vector<int64_t>> prompts = {{0, 34, 86, 69, 301, 291, 938}, {0, 316, 284, 117, 309}};
  for (int i = 0; i < requests; ++i) {
    RequestSpec s;
    s.promptIds = prompts[static_cast<size_t>(i)];
    s.maxNewTokens = 6;
    s.stopAtEos = false;
    s.arrivalTick = i * 2;
    specs.push_back(s);
  }
  EngineOptions o;
  o.recordSnapshots = snapshots;
  o.uncached = uncached;
  for (const auto& f : faults) o.faults.push_back(FaultSpec::parse(f));
  return Engine(m).run(specs, o);
}

// Writes `t`, lets tools/kvtrace.py rewrite it (optionally as a snapshot-only trace) and
// reads the Python-written file back.
Trace throughPython(const Trace& t, const std::string& name, bool snapshotsOnly) {
  const auto in = (tempDir() / (name + ".in.kvtrace")).string();
  const auto out = (tempDir() / (name + ".py.kvtrace")).string();
  TraceFile::write(t, in, true);
  auto r = python("kvtrace.py", "roundtrip " + quote(in) + " " + quote(out) + " --force" + (snapshotsOnly ? " --snapshots-only" : ""));
  EXPECT_EQ(r.status, 0) << r.output;
  return TraceFile::read(out);
}

// Positions [0, T) of a [h, t, d] tensor.
FloatTensor rowsOf(const FloatTensor& x, int64_t T) {
  const int64_t h = x.shape[0], t = x.shape[1], d = x.shape[2];
  FloatTensor out = FloatTensor::zeros({h, T, d});
  for (int64_t hh = 0; hh < h; ++hh)
    std::copy_n(x.data.begin() + hh * t * d, T * d, out.data.begin() + hh * T * d);
  return out;
}

AuditReport auditWithModel(const std::string& model, const Trace& t) {
  auto m = Model::load(hfModel(model));
  return Auditor::audit(*m, t).report;
}

}  // namespace

TEST(AuditTraceInput, PythonWrittenTracesGiveTheSameDiagnosis) {
  SKIP_WITHOUT_PYTHON();
  for (const std::string model : {"gpt2", "llama"}) {
    Trace clean = throughPython(engineTrace(model, {}, false), model + "-clean", false);
    auto cleanReport = auditWithModel(model, clean);
    EXPECT_TRUE(cleanReport.clean()) << cleanReport.toText();
    Trace faulty = throughPython(engineTrace(model, {"wrong_layer:layer=2,source=1", "cross_request:request=1,victim=0"}, false),
                                 model + "-faulty", false);
    auto rep = auditWithModel(model, faulty);
    EXPECT_TRUE(rep.hasFinding("wrong_layer")) << rep.toText();
    EXPECT_TRUE(rep.hasFinding("cross_request")) << rep.toText();
  }
}

TEST(AuditTraceInput, FullSnapshotTracesWithoutRecordsOrChecksums) {
  SKIP_WITHOUT_PYTHON();
  struct Expect {
    std::vector<std::string> faults;
    std::string id;
    int64_t step;
  };
  const std::vector<Expect> cases = {{{}, "", -1},
                                     {{"wrong_layer:layer=1,source=0"}, "wrong_layer", 0},
                                     {{"wrong_position:offset=2,step=2"}, "position", 2},
                                     {{"duplicate_append:layer=1,step=2"}, "duplicate_append", 2},
                                     {{"cross_request:request=1,victim=0"}, "cross_request", 2},
                                     {{"chunk_position:chunk=1,size=3"}, "chunk_position", 1}};
  int n = 0;
  for (const auto& c : cases) {
    Trace snap = throughPython(engineTrace("llama", c.faults, true), "snap" + std::to_string(n++), true);
    ASSERT_TRUE(snap.hasSnapshots());
    for (const auto& s : snap.steps)
      for (const auto& l : s.layers) ASSERT_FALSE(l.keyChecksum.has_value());
    auto rep = auditWithModel("llama", snap);
    if (c.id.empty()) {
      EXPECT_TRUE(rep.clean()) << rep.toText();
      continue;
    }
    EXPECT_TRUE(rep.hasFinding(c.id)) << (c.faults.empty() ? "" : c.faults[0]) << "\n" << rep.toText();
    EXPECT_EQ(rep.firstDivergence.step, c.step) << c.faults[0] << "\n" << rep.toText();
  }
}

TEST(AuditTraceInput, TwoTracesWithoutAModel) {
  SKIP_WITHOUT_PYTHON();
  Trace reference = throughPython(engineTrace("llama", {}, false, /*uncached=*/true), "tt-ref", false);
  EXPECT_EQ(reference.mode, "uncached");
  Trace clean = throughPython(engineTrace("llama", {}, false), "tt-clean", false);
  auto ok = Auditor::auditTraces(reference, clean).report;
  EXPECT_TRUE(ok.clean()) << ok.toText();
  EXPECT_EQ(ok.mode, "trace+trace");
  Trace faulty = throughPython(engineTrace("llama", {"wrong_layer:layer=2,source=1"}, false), "tt-faulty", false);
  auto bad = Auditor::auditTraces(reference, faulty).report;
  EXPECT_TRUE(bad.hasFinding("wrong_layer")) << bad.toText();
  EXPECT_EQ(bad.firstDivergence.layer, 2);
  Trace shifted = throughPython(engineTrace("llama", {"wrong_position:offset=4,step=1"}, false), "tt-pos", false);
  auto pos = Auditor::auditTraces(reference, shifted).report;
  EXPECT_TRUE(pos.hasFinding("position")) << pos.toText();
}

TEST(AuditTraceInput, AnotherPromptsTraceIsRefusedAsReference) {
  Trace reference = engineTrace("llama", {}, false, true, 1);
  Trace cached = engineTrace("llama", {}, false, false, 1);
  cached.requests[0].promptIds[1] = 35;
  auto rep = Auditor::auditTraces(reference, cached).report;
  EXPECT_TRUE(rep.hasFinding("reference")) << rep.toText();
  EXPECT_EQ(rep.stages[0].status, StageStatus::Fail);
}

TEST(AuditTraceInput, ReferenceFromTraceMatchesTheAuditsReferences) {
  Trace reference = engineTrace("llama", {}, false, /*uncached=*/true);
  Trace cached = engineTrace("llama", {"wrong_layer:layer=2,source=1"}, false);
  AuditResult result = Auditor::auditTraces(reference, cached);
  ASSERT_EQ(result.references.size(), size_t(2));
  EXPECT_EQ(result.addReferencesFromTrace(), size_t(0));  // nothing missing
  for (const RequestReference& audited : result.references) {
    const RequestReference full = referenceFromTrace(reference, audited.request);
    ASSERT_GE(full.ids.size(), audited.ids.size());
    const auto T = static_cast<int64_t>(audited.ids.size());
    EXPECT_TRUE(std::equal(audited.ids.begin(), audited.ids.end(), full.ids.begin()));
    ASSERT_EQ(full.keys.size(), audited.keys.size());
    for (size_t l = 0; l < full.keys.size(); ++l) {
      EXPECT_TRUE(closeTo(audited.keys[l], rowsOf(full.keys[l], T), 0.0f)) << "layer " << l;
      EXPECT_TRUE(closeTo(audited.values[l], rowsOf(full.values[l], T), 0.0f)) << "layer " << l;
    }
  }
  const RequestReference missing = referenceFromTrace(reference, 7);
  EXPECT_TRUE(missing.ids.empty());
  ASSERT_EQ(missing.keys.size(), size_t(reference.model.numLayers));
  EXPECT_EQ(missing.keys[0].shape,
            (std::vector<int64_t>{reference.model.numKvHeads, 0, reference.model.headDim}));
}

TEST(AuditTraceInput, ReferenceTraceRecordsMoveIntoTheReferencesNotCopied) {
  Trace reference = engineTrace("llama", {}, false, /*uncached=*/true);
  const Trace given = reference;
  Trace cached = engineTrace("llama", {}, false);
  AuditResult result = Auditor::auditTraces(reference, cached);
  EXPECT_EQ(result.report.verdict, "clean") << result.report.toText();
  EXPECT_EQ(reference, given);  // the caller's traces are copied in, never changed
  ASSERT_TRUE(result.referenceTrace);
  ASSERT_EQ(result.references.size(), cached.requests.size());
  for (const RequestReference& ref : result.references) {
    // The audit's own reference trace gave its records up to the reference ...
    for (const TraceStep* s : result.referenceTrace->stepsOf(ref.request))
      for (const TraceLayerRecord& rec : s->layers) EXPECT_TRUE(rec.keys.empty() && rec.values.empty());
    // ... which holds exactly what the given trace recorded, logits included.
    const RequestReference full = referenceFromTrace(given, ref.request);
    EXPECT_EQ(ref.ids, full.ids);
    for (size_t l = 0; l < full.keys.size(); ++l) {
      EXPECT_TRUE(closeTo(ref.keys[l], full.keys[l], 0.0f)) << "layer " << l;
      EXPECT_TRUE(closeTo(ref.values[l], full.values[l], 0.0f)) << "layer " << l;
    }
    ASSERT_EQ(ref.logits.shape, full.logits.shape);
    for (size_t i = 0; i < full.logits.data.size(); ++i)
      ASSERT_TRUE(ref.logits.data[i] == full.logits.data[i] ||
                  (std::isnan(ref.logits.data[i]) && std::isnan(full.logits.data[i])))
          << "logit " << i;
  }
  // The cached trace moved into the result is the one audited.
  EXPECT_EQ(result.trace, cached);
}

TEST(AuditTraceInput, ModelReferenceComputesOnlyTheRowsTheStepsChoseFrom) {
  auto m = Model::load(hfModel("llama"));
  const Trace t = engineTrace("llama", {}, false);
  const AuditResult result = Auditor::audit(*m, t);
  EXPECT_EQ(result.report.verdict, "clean") << result.report.toText();
  ASSERT_EQ(result.references.size(), t.requests.size());
  for (const RequestReference& ref : result.references) {
    const auto prompt = static_cast<int64_t>(t.findRequest(ref.request)->promptIds.size());
    EXPECT_EQ(ref.logitsFrom, prompt - 2);  // the prefill's row, and one row of slack
    EXPECT_EQ(ref.logitsAt(prompt - 3), nullptr);
    const ReferenceRun full = m->reference(ref.ids);
    const int64_t V = full.logits.shape[1];
    for (int64_t p = prompt - 2; p < static_cast<int64_t>(ref.ids.size()); ++p) {
      ASSERT_NE(ref.logitsAt(p), nullptr) << "position " << p;
      const FloatTensor row({1, V}, std::vector<float>(ref.logitsAt(p), ref.logitsAt(p) + V));
      EXPECT_TRUE(closeTo(row, rows(full.logits, p, 1), 1e-5f)) << "position " << p;
    }
  }
}

TEST(AuditTraceInput, ReferenceSideStaysVisibleWhenStageOneFails) {
  Trace reference = engineTrace("llama", {}, false, true, 1);
  Trace cached = engineTrace("llama", {}, false, false, 1);
  cached.requests[0].promptIds[1] = 35;
  AuditResult result = Auditor::auditTraces(reference, cached);
  ASSERT_EQ(result.report.stages[0].status, StageStatus::Fail);
  ASSERT_TRUE(result.referenceTrace);
  // auditTraces filled the reference in from the reference trace itself.
  ASSERT_EQ(result.references.size(), size_t(1));
  EXPECT_EQ(result.addReferencesFromTrace(), size_t(0));  // idempotent
  const FloatTensor ref = result.referenceKv(0, 0, 1, KvKind::Keys);
  const auto& prefill = reference.stepsOf(0).front()->layers[1].keys;  // [h, prompt, d]
  ASSERT_EQ(ref.shape, prefill.shape);
  EXPECT_TRUE(closeTo(ref, prefill, 0.0f));
  EXPECT_FALSE(result.layerMaxDiff(0, 0, KvKind::Keys).empty());
}

TEST(AuditTraceInput, PositionBeyondTheContextIsAContextLimitFinding) {
  auto m = Model::load(hfModel("gpt2"));  // 64 positions
  RequestSpec s;
  s.promptIds.assign(60, 7);
  s.maxNewTokens = 10;
  s.stopAtEos = false;
  Trace t = Engine(m).run({s}, {});
  ASSERT_EQ(t.requests[0].stopReason, "context_limit");
  auto fine = Auditor::audit(*m, t).report;
  EXPECT_TRUE(fine.clean()) << fine.toText();
  EXPECT_NE(fine.stopSummary.find("context_limit"), std::string::npos);
  // Another engine fed the last token anyway, at a position that does not exist.
  TraceStep extra = t.steps.back();
  extra.step += 1;
  extra.tick += 1;
  extra.fedIds = {t.requests[0].generated.back()};
  extra.positions = {64};
  for (auto& l : extra.layers) l.cacheLength += 1;
  t.steps.push_back(extra);
  t.requests[0].generated.push_back(extra.chosenToken);
  t.requests[0].stopReason = "max_new_tokens";
  auto rep = Auditor::audit(*m, t).report;
  EXPECT_TRUE(rep.hasFinding("context_limit")) << rep.toText();
}

TEST(AuditTraceInput, StaleTraceFromOtherWeightsFailsStageOne) {
  Trace t = engineTrace("llama", {}, false, false, 1);
  t.model.fingerprint = std::string(64, 'a');
  auto rep = auditWithModel("llama", t);
  EXPECT_TRUE(rep.hasFinding("reference")) << rep.toText();
  EXPECT_EQ(rep.rootStage, 1);
  EXPECT_EQ(rep.stages[1].status, StageStatus::NotRun);
}
