// qk_norm_order (KV Scope's row, the first added through the row registry): on a checkpoint
// with per-head q/k RMSNorm (the Qwen3 fixture written by real transformers), a cached path
// that applies the norm after RoPE. The evidence re-derives every key record from the
// checkpoint's k_norm weight; a RoPE-scaling mismatch on the same checkpoint, whose keys also
// go wrong from position 1 on with exact values, keeps its own row, and the fault refuses a
// checkpoint without q/k norm.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "AuditExpectations.hpp"
#include "RopeScalingCheckpoint.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "kvscope/FaultSpec.hpp"

using namespace kvscope;

namespace {

std::string qwen3() { return test::fixture("families/models/qwen3"); }

TEST(QkNormOrder, MatrixRowIsKvScopesAddition) {
  const auto& row = FailureMatrix::row(finding::QkNormOrder);
  EXPECT_NE(row.observation.find("exact at position 0"), std::string::npos);
  test::expectAdditionAfter(finding::QkNormOrder, finding::WindowWrap);
}

TEST(QkNormOrder, PrefillOnEveryLayerIsFoundAtLayer0Position1) {
  auto model = Model::load(qwen3());
  const Trace t = test::writtenAndRead(test::runWithFaults(qwen3(), {"qk_norm_order"}), "qk-norm-order",
                                       "prefill.kvtrace");
  const AuditReport rep = Auditor::audit(*model, t).report;
  const Finding& f = test::onlyFinding(rep, finding::QkNormOrder);
  EXPECT_EQ(f.step, 0);
  EXPECT_EQ(f.layer, 0);
  EXPECT_EQ(f.position, 1);  // position 0 is right: RoPE is the identity there
  const auto& ev = f.evidence;
  EXPECT_LE(ev.at("swapped_order_key_error"), ev.at("tolerance"));
  EXPECT_GT(ev.at("key_error"), 100 * ev.at("tolerance"));
  EXPECT_LT(ev.at("value_error"), 1e-4);
  // Every key record of layer 0 over the run: 10 prompt entries, then one per decode step.
  EXPECT_EQ(ev.at("records_compared"), 17.0);
  EXPECT_EQ(ev.at("records_diverged"), 16.0);
  EXPECT_GT(ev.at("k_norm_weight_spread"), 1.5);  // the fixture's randomised norms
  EXPECT_NE(f.explanation.find("after RoPE instead of before"), std::string::npos)
      << f.explanation;
  EXPECT_NE(f.explanation.find("position 0 is right"), std::string::npos) << f.explanation;
  EXPECT_EQ(rep.stages.at(3).status, StageStatus::Fail) << rep.toText();  // numerics
}

TEST(QkNormOrder, ADecodeStepOfASlidingLayerKeepsTheLayersBelowExact) {
  auto model = Model::load(qwen3());
  const AuditReport rep =
      Auditor::audit(*model, test::runWithFaults(qwen3(), {"qk_norm_order:layer=2,step=3"})).report;
  const Finding& f = test::onlyFinding(rep, finding::QkNormOrder);
  EXPECT_EQ(f.step, 3);
  EXPECT_EQ(f.layer, 2);
  EXPECT_EQ(f.position, 12);  // the token step 3 feeds: 10 prompt tokens, then steps 1..3
  EXPECT_EQ(f.evidence.at("records_compared"), 5.0);  // steps 3..7, one key each
  // Decode steps hold no position-0 record: the explanation does not claim one.
  EXPECT_EQ(f.explanation.find("position 0 is right"), std::string::npos) << f.explanation;
}

TEST(QkNormOrder, ARopeScalingMismatchOnTheSameCheckpointKeepsItsRow) {
  // The Qwen3 fixture with linear rope scaling 2, its scaling dropped on layer 1: keys wrong
  // from position 1 on, values exact, as with the swapped order; the swapped order cannot
  // reproduce them, so qk_norm_order does not claim them.
  const std::string dir = test::ropeScalingCopy(qwen3(), "qwen3-", "linear");
  auto model = Model::load(dir);
  const AuditReport rep =
      Auditor::audit(*model, test::runWithFaults(dir, {"rope_scaling:layer=1,step=0"})).report;
  EXPECT_FALSE(rep.hasFinding(finding::QkNormOrder)) << rep.toText();
  const Finding& f = test::onlyFinding(rep, finding::RopeScaling);
  EXPECT_EQ(f.layer, 1);
  // And the other way round: on that checkpoint the swapped order is qk_norm_order's.
  const AuditReport swapped = Auditor::audit(*model, test::runWithFaults(dir, {"qk_norm_order:layer=1"})).report;
  EXPECT_EQ(test::onlyFinding(swapped, finding::QkNormOrder).layer, 1);
  EXPECT_FALSE(swapped.hasFinding(finding::RopeScaling)) << swapped.toText();
}

TEST(QkNormOrder, ACleanRunAndACheckpointWithoutQkNorm) {
  auto model = Model::load(qwen3());
  const AuditReport clean = Auditor::audit(*model, test::runWithFaults(qwen3(), {})).report;
  EXPECT_TRUE(clean.findings.empty()) << clean.toText();
  try {
    test::runWithFaults(test::hfModel("llama"), {"qk_norm_order"});
    FAIL() << "a llama checkpoint has no q/k norm to swap";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("q/k norm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("llama"), std::string::npos) << e.what();
  }
}

TEST(QkNormOrder, AFaultForAnotherRequestSaysItNeverFired) {
  auto model = Model::load(qwen3());
  const AuditReport rep =
      Auditor::audit(*model, test::runWithFaults(qwen3(), {"qk_norm_order:request=1"})).report;
  EXPECT_TRUE(rep.findings.empty()) << rep.toText();
  EXPECT_NE(rep.toText().find("never fired: the run has no request 1"), std::string::npos)
      << rep.toText();
}

}  // namespace
