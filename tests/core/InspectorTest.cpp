// The inspection layer (kvscope/Inspection.hpp) on real audits of the llama fixture: the
// first divergence resolves to the faulted layer with the head and kind that differ most,
// the per-layer maxima equal the core's whole-cache comparison in any visiting order,
// findings are located, and the one rule for real columns and a request's stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "RopeScalingCheckpoint.hpp"
#include "TestSupport.hpp"
#include "kvscope/KvScope.hpp"  // the start-here header: every entry point compiles from it

using namespace kvscope;
using namespace kvscope::test;

namespace {

std::shared_ptr<const AuditJobOutput> auditWith(const std::vector<std::string>& faults) {
  AuditJobSpec spec;
  spec.modelDir = hfModel("llama");
  spec.promptIds = {{0, 34, 86, 69, 301, 291, 938}, {0, 316, 284, 117, 309}};
  spec.arrivalTicks = {0, 2};
  spec.maxNewTokens = 6;
  spec.faults = faults;
  return std::make_shared<const AuditJobOutput>(runAuditJob(spec));
}

bool sameDiffs(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

}  // namespace

TEST(Inspector, FirstDivergenceResolvesTheFaultedLayerHeadAndKind) {
  const auto out = auditWith({"wrong_layer:layer=2,source=1"});
  ASSERT_TRUE(out->result.report.firstDivergence.present) << out->result.report.toText();
  Inspector inspector(out);
  const auto first = inspector.firstDivergence();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->layer, 2);
  EXPECT_TRUE(first->autoHead && first->autoKind);
  const StepView v = inspector.view(*first);
  EXPECT_EQ(v.requested, *first);
  EXPECT_FALSE(v.point.autoHead || v.point.autoKind);
  EXPECT_EQ(v.point.layer, 2);
  // The resolved head is the one whose cache differs most at that layer.
  EXPECT_EQ(v.point.head, inspector.worstHead(v.point.request, v.point.step, 2, v.point.kind));
  EXPECT_GT(v.diffMax, 0.0f);
  for (int64_t h = 0; h < inspector.kvHeads(); ++h) {
    InspectionPoint other = v.point;
    other.head = h;
    EXPECT_LE(inspector.view(other).diffMax, v.diffMax) << "head " << h;
  }
  // Layers before the fault are noise, the faulted one is past its tolerance.
  ASSERT_EQ(v.layerMaxDiff.size(), size_t(inspector.layers()));
  ASSERT_EQ(v.layerNoiseFloor.size(), v.layerMaxDiff.size());
  EXPECT_LT(v.layerMaxDiff[0], v.layerNoiseFloor[0]);
  EXPECT_GT(v.layerMaxDiff[2], v.layerNoiseFloor[2]);
  // The step's own records: the whole prompt at the prefill, one token per decode step.
  for (const TraceStep* st : out->result.trace.stepsOf(v.point.request))
    if (st->step == v.point.step) {
      EXPECT_EQ(v.appendedCount, st->realFedCount());
    }
  EXPECT_FALSE(v.findings.empty());
}

TEST(Inspector, LayerMaximaEqualTheCoreInEveryVisitingOrder) {
  const auto out = auditWith({"wrong_layer:layer=2,source=1"});
  const AuditResult& r = out->result;
  std::vector<InspectionPoint> order;
  for (int64_t req : {0, 1})
    for (KvKind kind : {KvKind::Keys, KvKind::Values})
      for (const TraceStep* st : r.trace.stepsOf(req)) order.push_back({req, st->step, 1, 0, kind});
  std::vector<InspectionPoint> backward(order.rbegin(), order.rend());
  std::vector<InspectionPoint> shuffled = order;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(7));
  for (const auto* sequence : {&order, &backward, &shuffled}) {
    Inspector inspector(out);
    for (const InspectionPoint& p : *sequence)
      EXPECT_TRUE(
          sameDiffs(inspector.view(p).layerMaxDiff, r.layerMaxDiff(p.request, p.step, p.kind)))
          << "request " << p.request << " step " << p.step;
  }
}

TEST(Inspector, ViewBuffersAreTheChosenHeadOfTheCoreTensors) {
  const auto out = auditWith({});
  const AuditResult& r = out->result;
  ASSERT_TRUE(r.report.clean()) << r.report.toText();
  Inspector inspector(out);
  EXPECT_FALSE(inspector.firstDivergence());
  const InspectionPoint p{0, 3, 1, 1, KvKind::Values};
  const StepView v = inspector.view(p);
  const FloatTensor c = r.cachedKv(0, 3, 1, KvKind::Values);
  const FloatTensor ref = r.referenceKv(0, 3, 1, KvKind::Values);
  ASSERT_EQ(v.cachedPositions, c.shape[1]);
  ASSERT_EQ(v.referencePositions, ref.shape[1]);
  const int64_t T = c.shape[1], D = c.shape[2];
  ASSERT_EQ(v.headDim, D);
  for (int64_t q = 0; q < T; ++q)
    for (int64_t j = 0; j < D; ++j) {
      const auto src = static_cast<size_t>((1 * T + q) * D + j),
                 dst = static_cast<size_t>(q * D + j);
      ASSERT_EQ(v.cached[dst], c.data[src]);
      ASSERT_EQ(v.reference[dst], ref.data[src]);
    }
  EXPECT_EQ(inspector.referenceRow(0, 3), 7 + 3 - 1);
  EXPECT_EQ(v.logitDelta.size(), size_t(r.trace.model.vocabSize));
  EXPECT_LT(v.maxAbsLogitDelta, v.logitNoiseFloor);
  EXPECT_TRUE(v.note.empty()) << v.note;
}

TEST(Inspector, LocatesFindingsAndDrawsTheTimeline) {
  const auto out = auditWith({"wrong_position:offset=3,step=2"});
  const AuditReport& rep = out->result.report;
  const Finding* f = rep.finding(finding::Position);
  ASSERT_TRUE(f) << rep.toText();
  Inspector inspector(out);
  const InspectionPoint p = inspector.locate(*f);
  EXPECT_EQ(p.request, f->request);
  EXPECT_EQ(p.step, f->step);
  // A position fault rotates keys only: the view goes to the keys.
  EXPECT_EQ(inspector.view(p).point.kind, KvKind::Keys);
  const RequestTimeline& tl = inspector.timeline(f->request);
  EXPECT_EQ(tl.divergentStep, rep.firstDivergence.step);
  ASSERT_FALSE(tl.steps.empty());
  EXPECT_EQ(tl.steps.front().fed.size(),
            out->result.trace.findRequest(f->request)->promptIds.size());
  // The timeline shows the recorded (shifted) positions against the expected ones.
  bool shifted = false;
  for (const TimelineStep& s : tl.steps)
    shifted = shifted || s.recordedPosition != s.expectedPosition;
  EXPECT_TRUE(shifted);
  EXPECT_TRUE(inspector.timeline(99).steps.empty());
}

TEST(TraceRules, RealColumnsAndTheRequestStream) {
  TraceStep st;
  st.fedIds = {5, 6, 7, 8};
  st.fedMask = {0, 1, 1, 0};
  EXPECT_EQ(st.realColumns(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(st.realFedCount(), 2);
  EXPECT_FALSE(st.isRealEntry(0));
  EXPECT_TRUE(st.isRealEntry(2));
  // A layer that appended more records than were fed (a duplicate append): all are real.
  EXPECT_EQ(st.realColumns(5), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  st.fedMask.clear();
  EXPECT_EQ(st.realColumns(), (std::vector<int64_t>{0, 1, 2, 3}));
  TraceRequest r;
  r.promptIds = {1, 2};
  r.generated = {3};
  EXPECT_EQ(r.stream(), (std::vector<int64_t>{1, 2, 3}));
}

TEST(AuditStages, AFailedCheckSaysWhatFailedInEveryReport) {
  const auto out = auditWith({"wrong_layer:layer=2,source=1"});
  const AuditReport& rep = out->result.report;
  const std::string records = "FAIL: new K/V records differ from the reference projection";
  std::string failed;
  for (const auto& c : rep.stage(AuditStage::Cache)->checks)
    if (c.rfind(records, 0) == 0) failed = c;
  ASSERT_FALSE(failed.empty());
  for (const auto& c : rep.stage(AuditStage::Numerics)->checks) {
    if (c.rfind("FAIL: ", 0) == 0 && c.find("logits rows") != std::string::npos) {
      EXPECT_NE(c.find("beyond tolerance"), std::string::npos) << c;
    }
  }
  // The CLI's text and the Markdown print the same words.
  EXPECT_NE(rep.toText().find(failed), std::string::npos);
  EXPECT_NE(rep.toMarkdown().find(failed.substr(6)), std::string::npos);
  EXPECT_NE(rep.toMarkdown().find("### Failed checks"), std::string::npos);
}

TEST(AuditStages, OneCatalogueNamesTheReportsStages) {
  const auto out = auditWith({});
  const auto& stages = out->result.report.stages;
  ASSERT_EQ(stages.size(), auditStages().size());
  for (size_t i = 0; i < stages.size(); ++i) {
    EXPECT_EQ(stages[i].number, auditStages()[i].number);
    EXPECT_EQ(stages[i].id, auditStages()[i].id);
    EXPECT_EQ(stages[i].title, auditStages()[i].title);
  }
  EXPECT_EQ(out->result.report.stage(AuditStage::Numerics)->id, "numerics");
  for (const FailureMatrixRow& row : FailureMatrix::rows())
    EXPECT_FALSE(row.observation.empty()) << row.id;
  EXPECT_EQ(FailureMatrix::row(finding::WrongLayer).id, "wrong_layer");
  // The method's eight rows (audit-method.md) are marked as its own; the rest are KV Scope's.
  std::vector<std::string> method;
  for (const FailureMatrixRow& row : FailureMatrix::rows())
    if (row.origin == MatrixOrigin::Method) method.push_back(row.id);
  EXPECT_EQ(method, (std::vector<std::string>{finding::Position, finding::WrongLayer,
                                              finding::DuplicateAppend, finding::CrossRequest,
                                              finding::TieRule, finding::RngOrder,
                                              finding::StaleCache, finding::ContextLimit}));
  EXPECT_EQ(FailureMatrix::row(finding::SpeculativeRollback).origin, MatrixOrigin::KvScope);
}

TEST(Inspector, CorrectSpeculativeRollbackShowsNoRewrittenRows) {
  // Rejected drafts were appended, then trimmed: the engine's recorded checksums match the
  // kept rows, so no row looks overwritten and the cached side equals the reference.
  RequestSpec s;
  s.promptIds = {324, 86, 78, 422, 324, 86, 78};  // repeats: prompt-lookup drafts get accepted
  s.maxNewTokens = 12;
  s.stopAtEos = false;
  EngineOptions o;
  o.speculativeDrafts = 3;
  auto model = Model::load(hfModel("gpt2"));
  auto out = std::make_shared<AuditJobOutput>();
  out->result = Auditor::audit(*model, Engine(model).run({s}, o));
  ASSERT_TRUE(out->result.report.clean()) << out->result.report.toText();
  bool trimmed = false;
  for (const TraceStep& st : out->result.trace.steps) trimmed = trimmed || st.rejectedCount() > 0;
  ASSERT_TRUE(trimmed) << "the run rejected no draft: nothing to check";
  Inspector inspector(out);
  for (int64_t step : inspector.steps(0))
    for (int64_t layer = 0; layer < inspector.layers(); ++layer) {
      const StepView v = inspector.view({0, step, layer, 0, KvKind::Keys});
      EXPECT_FALSE(v.rowRewritten) << "step " << step << " layer " << layer << ": " << v.note;
      EXPECT_EQ(v.cachedPositions, v.referencePositions) << "step " << step;
      EXPECT_LT(v.diffMax, 1e-3f) << "step " << step << " layer " << layer;
    }
}

TEST(Inspector, TimelineMarksSpeculativeStepsKeptDraftsAndAQuantisedCache) {
  RequestSpec s;
  s.promptIds = {324, 86, 78, 422, 324, 86, 78};
  s.maxNewTokens = 12;
  s.stopAtEos = false;
  auto model = Model::load(hfModel("gpt2"));
  auto timelineOf = [&](const EngineOptions& o) {
    auto out = std::make_shared<AuditJobOutput>();
    out->result = Auditor::audit(*model, Engine(model).run({s}, o));
    return Inspector(out).timeline(0);
  };
  auto kinds = [](const RequestTimeline& tl, const std::string& kind) {
    std::vector<const TimelineMarker*> found;
    for (const auto& m : tl.markers)
      if (m.kind == kind) found.push_back(&m);
    return found;
  };
  EngineOptions speculative;
  speculative.speculativeDrafts = 3;
  const RequestTimeline clean = timelineOf(speculative);
  ASSERT_EQ(kinds(clean, "speculative").size(), 1u);
  EXPECT_EQ(kinds(clean, "speculative").front()->step, 1);
  EXPECT_TRUE(kinds(clean, "rollback_skipped").empty());
  EXPECT_TRUE(kinds(clean, "kv_cache").empty());
  EngineOptions skipped = speculative;
  skipped.faults = {FaultSpec::parse("speculative_rollback:layer=1,step=1")};
  const RequestTimeline skippedTimeline = timelineOf(skipped);
  const auto kept = kinds(skippedTimeline, "rollback_skipped");
  ASSERT_EQ(kept.size(), 1u);  // the onset only
  EXPECT_EQ(kept.front()->step, 1);
  EXPECT_TRUE(kept.front()->alarm);
  EXPECT_NE(kept.front()->label.find(" kept"), std::string::npos) << kept.front()->label;
  EngineOptions quantised;
  quantised.kvCacheDtype = "int8";
  const RequestTimeline quantisedTimeline = timelineOf(quantised);
  const auto cache = kinds(quantisedTimeline, "kv_cache");
  ASSERT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.front()->label, "int8, a scale per token and kv head");
  EXPECT_TRUE(kinds(clean, "rope").empty());  // default RoPE declares nothing
}

TEST(Inspector, TimelineMarksTheRopeScalingAndWhereKeysLeaveIt) {
  AuditJobSpec spec;
  spec.modelDir = ropeScalingLlama("llama3");
  spec.promptIds = {{0, 34, 86, 69, 301, 291, 938}};
  spec.maxNewTokens = 6;
  spec.faults = {"rope_scaling:layer=1,step=2"};
  const RequestTimeline tl =
      Inspector(std::make_shared<const AuditJobOutput>(runAuditJob(spec))).timeline(0);
  std::vector<const TimelineMarker*> rope, mismatch;
  for (const auto& m : tl.markers) {
    if (m.kind == "rope") rope.push_back(&m);
    if (m.kind == "rope_scaling") mismatch.push_back(&m);
  }
  ASSERT_EQ(rope.size(), 1u);
  EXPECT_EQ(rope.front()->label, "RoPE llama3 x8");
  EXPECT_FALSE(rope.front()->alarm);
  ASSERT_EQ(mismatch.size(), 1u);
  EXPECT_EQ(mismatch.front()->step, 2);
  EXPECT_TRUE(mismatch.front()->alarm);
  EXPECT_EQ(mismatch.front()->label, "layer 1 keys at another RoPE scaling");
}

TEST(Inspector, ADuplicateAppendIsNotCalledNoise) {
  // duplicate_append at layer 1, step 2: layer 1's cache holds one record twice. Every
  // compared entry agrees with the reference (the extra one has nothing to compare with),
  // yet the difference heatmap must not call the layer noise; the untouched layer 0 is.
  const auto out = auditWith({"duplicate_append:layer=1,step=2"});
  ASSERT_FALSE(out->result.report.clean()) << out->result.report.toText();
  Inspector inspector(out);
  for (KvKind kind : {KvKind::Keys, KvKind::Values}) {
    const StepView bad = inspector.view({0, 2, 1, 0, kind});
    ASSERT_FALSE(bad.absDiff.empty()) << bad.note;
    EXPECT_NE(bad.cachedPositions, bad.referencePositions);
    EXPECT_LE(bad.diffMax, bad.diffFloor) << "the compared entries differ: not the case here";
    EXPECT_FALSE(bad.diffIsNoise());
    EXPECT_NE(bad.diffStructure.find("positions, the reference"), std::string::npos)
        << bad.diffStructure;
    const StepView fine = inspector.view({0, 2, 0, 0, kind});
    EXPECT_EQ(fine.cachedPositions, fine.referencePositions);
    EXPECT_TRUE(fine.diffIsNoise()) << fine.diffStructure << " max " << fine.diffMax
                                    << " floor " << fine.diffFloor;
  }
}

// Issue 27, item 9: a trace whose recorder writes no arrival events (the transformers
// recorder of python/kvscope_trace) still marks where each request arrives, on its own
// timeline and on the timelines of the requests running then; KV Scope's own trace is
// unchanged.
TEST(Inspector, ArrivalsOfATraceWithoutArrivalEventsComeFromTheFirstRecords) {
  const auto own = auditWith({});
  auto foreign = std::make_shared<AuditJobOutput>(*own);
  for (TraceStep& st : foreign->result.trace.steps)
    st.events.erase(std::remove(st.events.begin(), st.events.end(), "arrival"), st.events.end());
  auto markers = [](const RequestTimeline& tl, const std::string& kind) {
    std::vector<std::pair<int64_t, std::string>> out;
    for (const TimelineMarker& m : tl.markers)
      if (m.kind == kind) out.emplace_back(m.step, m.label);
    return out;
  };
  const Inspector mine(own), theirs(foreign);
  for (int64_t request : {int64_t(0), int64_t(1)}) {
    const auto ownArrival = markers(mine.timeline(request), "arrival");
    ASSERT_EQ(ownArrival.size(), 1u) << "request " << request;
    EXPECT_EQ(markers(theirs.timeline(request), "arrival"), ownArrival) << "request " << request;
    EXPECT_EQ(ownArrival.front().first, own->result.trace.stepsOf(request).front()->step);
  }
  const auto other = markers(mine.timeline(0), "other_arrival");
  ASSERT_EQ(other.size(), 1u);
  EXPECT_NE(other.front().second.find("req 1 arrives (tick 2)"), std::string::npos)
      << other.front().second;
  EXPECT_EQ(markers(theirs.timeline(0), "other_arrival"), other);
}

namespace {

// What each layer is travels with the inspection: a front end names sliding and NoPE layers,
// sinks, soft-caps and experts beside the shown layer, from the checkpoint's config.
std::shared_ptr<const AuditJobOutput> familyAudit(const std::string& family) {
  AuditJobSpec spec;
  spec.modelDir = test::fixture("families/models/" + family);
  spec.promptIds = {{5, 17, 300, 41, 99, 7, 12, 250, 3, 64}};
  spec.maxNewTokens = 3;
  return std::make_shared<const AuditJobOutput>(runAuditJob(spec));
}

std::string kindAt(Inspector& insp, int64_t layer) {
  InspectionPoint p;
  p.layer = layer;
  return insp.view(p).layerKind;
}

TEST(Inspector, EachLayerSaysWhatKindItIs) {
  Inspector gemma2(familyAudit("gemma2"));
  EXPECT_EQ(kindAt(gemma2, 0), "sliding window 6, RoPE, soft-cap 3");
  EXPECT_EQ(kindAt(gemma2, 1), "full attention, RoPE, soft-cap 3");
  Inspector smollm3(familyAudit("smollm3"));
  EXPECT_EQ(kindAt(smollm3, 1), "full attention, NoPE");
  EXPECT_EQ(kindAt(smollm3, 0), "full attention, RoPE");
  Inspector gptOss(familyAudit("gpt_oss"));
  EXPECT_EQ(kindAt(gptOss, 0), "sliding window 6, yarn RoPE x32, sinks, MoE 2 of 4 experts");
  Inspector gemma3(familyAudit("gemma3_text"));
  EXPECT_EQ(kindAt(gemma3, 2), "full attention, linear RoPE x8 theta 1e+06");
  EXPECT_EQ(kindAt(gemma3, 0), "sliding window 6, RoPE theta 10000");
}

}  // namespace
