// nope_layer_rope (KV Scope's row, the first a family file brought): on a checkpoint with NoPE
// layers (the SmolLM3 fixture written by real transformers: no_rope_layers [1, 0, 1]), a
// cached path that reads the list inverted. The evidence re-derives every key record from the
// reference with the layer's rotation toggled; qk_norm_order, whose signature reads the same,
// does not claim it (and the other way round), and the fault refuses a checkpoint whose every
// layer rotates.
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

std::string smollm3() { return test::fixture("families/models/smollm3"); }

TEST(NopeLayerRope, MatrixRowIsKvScopesAddition) {
  const auto& row = FailureMatrix::row(finding::NopeLayerRope);
  EXPECT_NE(row.observation.find("NoPE layers"), std::string::npos);
  test::expectAdditionAfter(finding::NopeLayerRope, finding::QkNormOrder);
}

TEST(NopeLayerRope, TheListReadInvertedIsFoundAtLayer0Position1) {
  // Every layer flipped: layer 0 (rotary by the checkpoint) is left unrotated first.
  auto model = Model::load(smollm3());
  const Trace t = test::writtenAndRead(test::runWithFaults(smollm3(), {"nope_layer_rope"}), "nope-layer-rope",
                                       "all.kvtrace");
  const AuditReport rep = Auditor::audit(*model, t).report;
  const Finding& f = test::onlyFinding(rep, finding::NopeLayerRope);
  EXPECT_EQ(f.step, 0);
  EXPECT_EQ(f.layer, 0);
  EXPECT_EQ(f.position, 1);  // position 0 is right: the rotation is the identity there
  const auto& ev = f.evidence;
  EXPECT_LE(ev.at("toggled_rotation_key_error"), ev.at("tolerance"));
  EXPECT_GT(ev.at("key_error"), 100 * ev.at("tolerance"));
  EXPECT_LT(ev.at("value_error"), 1e-4);
  EXPECT_EQ(ev.at("layer_rotates"), 1.0);
  EXPECT_EQ(ev.at("records_compared"), 17.0);  // 10 prompt entries, then one per decode step
  EXPECT_EQ(ev.at("records_diverged"), 16.0);
  EXPECT_NE(f.explanation.find("left unrotated"), std::string::npos) << f.explanation;
  EXPECT_NE(f.explanation.find("position 0 is right"), std::string::npos) << f.explanation;
  EXPECT_FALSE(rep.hasFinding(finding::QkNormOrder)) << rep.toText();
}

TEST(NopeLayerRope, ANopeLayerThatRotatesFromADecodeStep) {
  auto model = Model::load(smollm3());
  const AuditReport rep =
      Auditor::audit(*model, test::runWithFaults(smollm3(), {"nope_layer_rope:layer=1,step=2"})).report;
  const Finding& f = test::onlyFinding(rep, finding::NopeLayerRope);
  EXPECT_EQ(f.step, 2);
  EXPECT_EQ(f.layer, 1);
  EXPECT_EQ(f.position, 11);  // the token step 2 feeds: 10 prompt tokens, then steps 1..2
  EXPECT_EQ(f.evidence.at("layer_rotates"), 0.0);
  EXPECT_NE(f.explanation.find("rotated to its position"), std::string::npos) << f.explanation;
}

TEST(NopeLayerRope, ASwappedNormOrderIsNotClaimed) {
  // qk_norm_order on the Qwen3 fixture has the same signature; it has no NoPE layer, and its
  // records are the swapped order's, not a toggled rotation's.
  const std::string qwen3 = test::fixture("families/models/qwen3");
  auto model = Model::load(qwen3);
  const AuditReport rep = Auditor::audit(*model, test::runWithFaults(qwen3, {"qk_norm_order"})).report;
  EXPECT_FALSE(rep.hasFinding(finding::NopeLayerRope)) << rep.toText();
  EXPECT_TRUE(rep.hasFinding(finding::QkNormOrder)) << rep.toText();
}

TEST(NopeLayerRope, ACleanRunAndACheckpointWithoutNopeLayers) {
  auto model = Model::load(smollm3());
  const AuditReport clean = Auditor::audit(*model, test::runWithFaults(smollm3(), {})).report;
  EXPECT_TRUE(clean.findings.empty()) << clean.toText();
  try {
    test::runWithFaults(test::hfModel("llama"), {"nope_layer_rope"});
    FAIL() << "a llama checkpoint has no NoPE layers";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("NoPE layers"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("llama"), std::string::npos) << e.what();
  }
}

}  // namespace
