// softcap_dropped (KV Scope's row, Gemma 2's): on a checkpoint with an attention soft-cap (the
// Gemma 2 fixture written by real transformers: attn_logit_softcapping 3, layers sliding /
// full / sliding), a cached path that computes a layer's scores without it. The layer's own
// records stay exact; the evidence re-derives the run with the cap dropped and must reproduce
// every record and logits row. A wrong-layer cache on the same checkpoint is not claimed, and
// the fault refuses a checkpoint without a soft-cap.
#include <gtest/gtest.h>

#include "AuditExpectations.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "kvscope/FaultSpec.hpp"

using namespace kvscope;

namespace {

std::string gemma2() { return test::fixture("families/models/gemma2"); }

TEST(SoftcapDropped, MatrixRowIsKvScopesAddition) {
  const auto& row = FailureMatrix::row(finding::SoftcapDropped);
  EXPECT_NE(row.observation.find("soft-cap"), std::string::npos);
  test::expectAdditionAfter(finding::SoftcapDropped, finding::NopeLayerRope);
}

TEST(SoftcapDropped, EveryLayerWithoutTheCapIsFoundAtLayer0Position1) {
  auto model = Model::load(gemma2());
  const Trace t = test::writtenAndRead(test::runWithFaults(gemma2(), {"softcap_dropped"}), "softcap-dropped",
                                       "all.kvtrace");
  const AuditReport rep = Auditor::audit(*model, t).report;
  const Finding& f = test::onlyFinding(rep, finding::SoftcapDropped);
  EXPECT_EQ(f.step, 0);
  EXPECT_EQ(f.layer, 0);     // the layer whose attention ran uncapped
  EXPECT_EQ(f.position, 1);  // one key at position 0: weight 1 whatever the cap
  const auto& ev = f.evidence;
  EXPECT_EQ(ev.at("record_layer"), 1.0);
  EXPECT_EQ(ev.at("uncapped_layers_above"), 1.0);
  EXPECT_LE(ev.at("hypothesis_error"), ev.at("tolerance"));
  EXPECT_LE(ev.at("uncapped_layer_record_error"), ev.at("tolerance"));
  EXPECT_GT(ev.at("key_error"), 100 * ev.at("tolerance"));
  EXPECT_GT(ev.at("value_error"), 100 * ev.at("tolerance"));
  EXPECT_EQ(ev.at("records_compared"), 3.0 * 17.0);  // 3 layers x (10 prompt + 7 decode)
  EXPECT_EQ(ev.at("logit_rows_compared"), 8.0);
  EXPECT_EQ(ev.at("softcap"), 3.0);
  EXPECT_NE(f.explanation.find("position 0 is right"), std::string::npos) << f.explanation;
}

TEST(SoftcapDropped, OneLayerFromADecodeStep) {
  auto model = Model::load(gemma2());
  const AuditReport rep =
      Auditor::audit(*model, test::runWithFaults(gemma2(), {"softcap_dropped:layer=1,step=3"})).report;
  const Finding& f = test::onlyFinding(rep, finding::SoftcapDropped);
  EXPECT_EQ(f.step, 3);
  EXPECT_EQ(f.layer, 1);
  EXPECT_EQ(f.position, 12);  // the token step 3 feeds: 10 prompt tokens, then steps 1..3
  EXPECT_EQ(f.evidence.at("record_layer"), 2.0);
  // Dropped on layer 1 alone: the pass without the cap on layers 1 and 2 does not fit.
  EXPECT_EQ(f.evidence.at("uncapped_layers_above"), 0.0);
}

TEST(SoftcapDropped, TheLastLayerLeavesEveryRecordRightAndTheLogitsWrong) {
  auto model = Model::load(gemma2());
  const AuditReport rep =
      Auditor::audit(*model, test::runWithFaults(gemma2(), {"softcap_dropped:layer=2"})).report;
  const Finding& f = test::onlyFinding(rep, finding::SoftcapDropped);
  EXPECT_EQ(f.step, 0);
  EXPECT_EQ(f.layer, 2);
  EXPECT_EQ(f.evidence.count("record_layer"), 0u);
  EXPECT_GT(f.evidence.at("logit_rows_compared"), 0.0);
  EXPECT_NE(f.explanation.find("every K/V record is exact"), std::string::npos) << f.explanation;
}

TEST(SoftcapDropped, AWrongLayerCacheIsNotClaimed) {
  auto model = Model::load(gemma2());
  const AuditReport rep =
      Auditor::audit(*model, test::runWithFaults(gemma2(), {"wrong_layer:layer=2,source=1"})).report;
  EXPECT_FALSE(rep.hasFinding(finding::SoftcapDropped)) << rep.toText();
  EXPECT_TRUE(rep.hasFinding(finding::WrongLayer)) << rep.toText();
}

TEST(SoftcapDropped, ACleanRunAndACheckpointWithoutASoftcap) {
  auto model = Model::load(gemma2());
  const AuditReport clean = Auditor::audit(*model, test::runWithFaults(gemma2(), {})).report;
  EXPECT_TRUE(clean.findings.empty()) << clean.toText();
  try {
    test::runWithFaults(test::fixture("families/models/qwen3"), {"softcap_dropped"});
    FAIL() << "a qwen3 checkpoint has no soft-cap";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("attn_logit_softcapping"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("qwen3"), std::string::npos) << e.what();
  }
}

}  // namespace
