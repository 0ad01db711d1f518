// Speculative decoding and prefix caching on a model with recurrent (Gated DeltaNet) layers: the
// cached engine keeps the state after each draft and after each prefix block, takes back the one
// after the accepted tokens and hands a prefix's over on a hit, so such runs equal their plain
// ones and audit clean; the rows state_rollback and prefix_state find their faults (a state kept
// after rejected drafts; a hit without its state) at the step that did it, re-derived. On the
// Qwen3.5 fixture written by real transformers 5.17 (layers 0 and 2 recurrent).
#include <gtest/gtest.h>

#include <algorithm>

#include "AuditExpectations.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/AuditJob.hpp"
#include "kvscope/Inspection.hpp"

using namespace kvscope;

namespace {

std::string rollbackModelDir() { return test::fixture("families/models/qwen3_5_text"); }

// A prompt that repeats itself, so prompt-lookup drafts are proposed from the first decode on.
RequestSpec repeatingRequest() {
  RequestSpec s;
  s.promptIds = {5, 17, 300, 41, 5, 17, 300, 41, 5, 17};
  s.maxNewTokens = 12;
  s.stopAtEos = false;
  return s;
}

// Two prompts sharing their first 8 tokens (two blocks of 4); the second arrives a tick later.
std::vector<RequestSpec> sharedPrefixRequests() {
  RequestSpec a, b;
  a.promptIds = {5, 17, 300, 41, 99, 7, 12, 250, 3, 64};
  b.promptIds = {5, 17, 300, 41, 99, 7, 12, 250, 44, 45, 46};
  for (RequestSpec* r : {&a, &b}) {
    r->maxNewTokens = 5;
    r->stopAtEos = false;
  }
  b.arrivalTick = 1;
  return {a, b};
}

int64_t rejectedSteps(const Trace& t) {
  return std::count_if(t.steps.begin(), t.steps.end(), [](const TraceStep& st) { return st.rejectedCount() > 0; });
}

TEST(RecurrentRollback, SpeculativeStepsTakeBackTheStateAfterTheAcceptedTokens) {
  auto model = Model::load(rollbackModelDir());
  const Trace plain = Engine(model).run({repeatingRequest()}, {});
  EngineOptions o;
  o.speculativeDrafts = 3;
  const Trace spec = test::writtenAndRead(Engine(model).run({repeatingRequest()}, o), "recurrent-rollback",
                                          "speculative.kvtrace");
  ASSERT_GT(rejectedSteps(spec), 0) << "no draft was rejected: nothing rolled back";
  EXPECT_EQ(spec.requests[0].generated, plain.requests[0].generated);
  const AuditReport rep = Auditor::audit(*model, spec).report;
  EXPECT_TRUE(rep.findings.empty()) << rep.toText();
  const std::string checks = test::allStageChecks(rep);
  EXPECT_NE(checks.find("ok: the recurrent states of layers 0 and 2 equal the reference's"), std::string::npos)
      << checks;
  EXPECT_NE(checks.find("(all 4 layers; layers 0 and 2 keep a recurrent state instead)"), std::string::npos) << checks;
}

TEST(RecurrentRollback, AStateKeptAfterRejectedDraftsIsFoundAtThatStep) {
  auto model = Model::load(rollbackModelDir());
  EngineOptions o;
  o.faults.push_back(FaultSpec::parse("state_rollback:step=1"));
  const Trace t = Engine(model).run({repeatingRequest()}, o);
  ASSERT_EQ(t.faultFirings.size(), 1u);
  ASSERT_TRUE(t.faultFirings[0].fired) << t.faultFirings[0].describe();
  const TraceStep* first = nullptr;
  for (const auto& st : t.steps)
    if (!first && st.step >= 1 && st.rejectedCount() > 0) first = &st;
  ASSERT_NE(first, nullptr);
  const AuditReport rep = Auditor::audit(*model, t).report;
  const Finding& f = test::onlyFinding(rep, finding::StateRollback);
  EXPECT_EQ(f.step, first->step);
  EXPECT_EQ(f.layer, 0);
  EXPECT_EQ(f.evidence.at("rejected"), static_cast<double>(first->rejectedCount()));
  EXPECT_GT(f.evidence.at("state_error"), f.evidence.at("state_tolerance"));
  EXPECT_LE(f.evidence.at("state_vs_rejected_reference"), f.evidence.at("state_tolerance"));
  EXPECT_DOUBLE_EQ(f.confidence, 0.99);
  EXPECT_NE(f.explanation.find("the rejected drafts were not rolled back"), std::string::npos) << f.explanation;
  // States recorded every fourth step only: the next step's records are the first wrong ones
  // and the row names the speculative step before them, a nearest answer.
  o.recordStatesEvery = 4;
  const Trace thin = Engine(model).run({repeatingRequest()}, o);
  const AuditReport thinReport = Auditor::audit(*model, thin).report;
  const Finding& g = test::onlyFinding(thinReport, finding::StateRollback);
  EXPECT_EQ(g.evidence.at("speculative_step"), static_cast<double>(first->step));
  EXPECT_GT(g.step, first->step);
  EXPECT_DOUBLE_EQ(g.confidence, 0.6);
}

TEST(RecurrentRollback, APrefixHitHandsTheRecurrentStateOver) {
  auto model = Model::load(rollbackModelDir());
  const Trace plain = Engine(model).run(sharedPrefixRequests(), {});
  EngineOptions o;
  o.prefixCacheBlock = 4;
  const Trace cached =
      test::writtenAndRead(Engine(model).run(sharedPrefixRequests(), o), "recurrent-rollback", "prefix.kvtrace");
  const auto hit = std::find_if(cached.steps.begin(), cached.steps.end(),
                                [](const TraceStep& st) { return st.reusedCount > 0; });
  ASSERT_NE(hit, cached.steps.end()) << "no prefix-cache hit";
  EXPECT_EQ(hit->request, 1);
  EXPECT_EQ(hit->reusedCount, 8);
  EXPECT_EQ(cached.requests[1].generated, plain.requests[1].generated);
  const AuditReport rep = Auditor::audit(*model, cached).report;
  EXPECT_TRUE(rep.findings.empty()) << rep.toText();
}

TEST(RecurrentRollback, AHitWithoutItsStateIsFoundAtTheHit) {
  auto model = Model::load(rollbackModelDir());
  EngineOptions o;
  o.faults.push_back(FaultSpec::parse("prefix_state:block=4"));
  const Trace t = Engine(model).run(sharedPrefixRequests(), o);
  ASSERT_EQ(t.faultFirings.size(), 1u);
  ASSERT_TRUE(t.faultFirings[0].fired) << t.faultFirings[0].describe();
  const AuditReport rep = Auditor::audit(*model, t).report;
  const Finding& f = test::onlyFinding(rep, finding::PrefixState);
  EXPECT_EQ(f.request, 1);
  EXPECT_EQ(f.step, 0);
  EXPECT_EQ(f.layer, 0);
  EXPECT_EQ(f.evidence.at("reused_entries"), 8.0);
  EXPECT_LE(f.evidence.at("state_vs_fresh_after_prefix"), f.evidence.at("state_tolerance"));
  EXPECT_DOUBLE_EQ(f.confidence, 0.99);
  EXPECT_NE(f.explanation.find("handed over the rows but not the state"), std::string::npos) << f.explanation;
}

// The inspector at a wrong state: the layer's value heads (4, where the fixture has 2 KV heads)
// are selectable, the auto head is the value head whose state differs most, and the layer
// overview's bar for the recurrent layer is its state's difference against its own tolerance.
TEST(RecurrentRollback, TheInspectorShowsTheWrongStateOnItsOwnScale) {
  auto model = Model::load(rollbackModelDir());
  EngineOptions o;
  o.faults.push_back(FaultSpec::parse("prefix_state:block=4"));
  auto out = std::make_shared<AuditJobOutput>();
  out->result = Auditor::audit(*model, Engine(model).run(sharedPrefixRequests(), o));
  ASSERT_EQ(out->result.report.findings.size(), 1u) << out->result.report.toText();
  Inspector inspector(out);
  InspectionPoint p = inspector.locate(out->result.report.findings[0]);
  EXPECT_EQ(inspector.headsAt(0), 4);
  EXPECT_EQ(inspector.headsAt(1), inspector.kvHeads());
  const StepView v = inspector.view(p);
  ASSERT_TRUE(v.showsState) << v.note;
  EXPECT_EQ(v.heads, 4);
  EXPECT_GE(v.point.head, 0);
  EXPECT_EQ(v.point.head, v.worstHead);
  ASSERT_GE(v.layerMaxDiff.size(), 2u);
  ASSERT_GE(v.layerNoiseFloor.size(), 2u);
  EXPECT_GT(v.layerMaxDiff[0], v.layerNoiseFloor[0]);  // the state's bar past its floor
  EXPECT_GT(v.layerNoiseFloor[0], 0.0);
  // A value head beyond the KV heads is shown, not clamped away.
  p.autoHead = false;
  p.head = 3;
  EXPECT_EQ(inspector.view(p).point.head, 3);
  p.layer = 1;  // an attention layer: its KV heads
  EXPECT_EQ(inspector.view(p).point.head, inspector.kvHeads() - 1);
}

TEST(RecurrentRollback, RowsAreKvScopesAndWhatCannotApplyIsRefusedOrSaysWhy) {
  test::expectAdditionAfter(finding::StateRollback, finding::RecurrentState);
  test::expectAdditionAfter(finding::PrefixState, finding::StateRollback);
  auto refusal = [](const std::string& dir, const std::string& fault) {
    try {
      test::runWithFaults(dir, {fault});
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string qwen3 = test::fixture("families/models/qwen3");
  EXPECT_NE(refusal(qwen3, "state_rollback").find("needs a checkpoint with recurrent layers"), std::string::npos);
  EXPECT_NE(refusal(qwen3, "prefix_state").find("needs a checkpoint with recurrent layers"), std::string::npos);
  EXPECT_NE(refusal(rollbackModelDir(), "state_rollback:layer=1").find("layer 1 is an attention layer"),
            std::string::npos);
  EXPECT_NE(refusal(rollbackModelDir(), "prefix_state:layer=3").find("layer 3 is an attention layer"),
            std::string::npos);
  // One request alone: no prefix hit, and the fault says so.
  const Trace alone = test::runWithFaults(rollbackModelDir(), {"prefix_state"});
  ASSERT_EQ(alone.faultFirings.size(), 1u);
  EXPECT_FALSE(alone.faultFirings[0].fired);
  EXPECT_NE(alone.faultFirings[0].reason.find("no prefix hit"), std::string::npos) << alone.faultFirings[0].reason;
}

}  // namespace
