// layer_rope_theta (KV Scope's row, brought by Gemma 3): on a checkpoint whose sliding layers
// rotate with a RoPE of their own (the gemma3_text fixture written by real transformers:
// sliding layers 0, 1, 3 at theta 10000 unscaled, the full-attention layer 2 at theta 1e6
// with linear scaling x 8), a cached path that rotates a layer with the other layer type's
// RoPE. The evidence re-derives every key record from the reference; the rows with the same
// signature (qk_norm_order, nope_layer_rope, rope_scaling) do not claim it, and the fault
// refuses a checkpoint with one RoPE.
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

std::string gemma3() { return test::fixture("families/models/gemma3_text"); }

TEST(LayerRopeTheta, MatrixRowIsKvScopesAddition) {
  const auto& row = FailureMatrix::row(finding::LayerRopeTheta);
  EXPECT_NE(row.observation.find("RoPE per layer type"), std::string::npos);
  test::expectAdditionAfter(finding::LayerRopeTheta, finding::SoftcapDropped);
}

TEST(LayerRopeTheta, SlidingLayersWithTheGlobalRopeAreFoundAtLayer0Position1) {
  // Every layer swapped: layer 0 (sliding) rotates with theta 1e6 / linear x 8 first.
  auto model = Model::load(gemma3());
  const Trace t = test::writtenAndRead(test::runWithFaults(gemma3(), {"layer_rope_theta"}),
                                       "layer-rope-theta", "all.kvtrace");
  const AuditReport rep = Auditor::audit(*model, t).report;
  const Finding& f = test::onlyFinding(rep, finding::LayerRopeTheta);
  EXPECT_EQ(f.step, 0);
  EXPECT_EQ(f.layer, 0);
  EXPECT_EQ(f.position, 1);  // position 0 is right: both rotations are the identity there
  const auto& ev = f.evidence;
  EXPECT_LE(ev.at("other_rope_key_error"), ev.at("tolerance"));
  EXPECT_GT(ev.at("key_error"), 100 * ev.at("tolerance"));
  EXPECT_LT(ev.at("value_error"), 1e-4);
  EXPECT_EQ(ev.at("sliding_layer"), 1.0);
  EXPECT_EQ(ev.at("layer_rope_theta"), 10000.0);
  EXPECT_EQ(ev.at("used_rope_theta"), 1e6);
  EXPECT_NE(f.explanation.find("full-attention layers' RoPE instead (theta 1e+06, linear x 8"),
            std::string::npos)
      << f.explanation;
  EXPECT_NE(f.explanation.find("position 0 is right"), std::string::npos) << f.explanation;
  for (const char* other : {finding::QkNormOrder, finding::NopeLayerRope, finding::RopeScaling})
    EXPECT_FALSE(rep.hasFinding(other)) << other << "\n" << rep.toText();
}

TEST(LayerRopeTheta, TheGlobalLayerWithTheLocalRopeFromADecodeStep) {
  auto model = Model::load(gemma3());
  const AuditReport rep =
      Auditor::audit(*model, test::runWithFaults(gemma3(), {"layer_rope_theta:layer=2,step=2"})).report;
  const Finding& f = test::onlyFinding(rep, finding::LayerRopeTheta);
  EXPECT_EQ(f.step, 2);
  EXPECT_EQ(f.layer, 2);
  EXPECT_EQ(f.evidence.at("sliding_layer"), 0.0);
  EXPECT_EQ(f.evidence.at("used_rope_theta"), 10000.0);
  EXPECT_EQ(f.evidence.at("exact_earlier_sliding_layers"), 2.0);
  EXPECT_NE(f.explanation.find("a full-attention layer"), std::string::npos) << f.explanation;
}

TEST(LayerRopeTheta, OtherRotationFaultsOnTheSameCheckpointAreNotClaimed) {
  // qk_norm_order on Gemma 3 (it has a q/k norm): the same signature, another hypothesis.
  auto model = Model::load(gemma3());
  const AuditReport rep = Auditor::audit(*model, test::runWithFaults(gemma3(), {"qk_norm_order"})).report;
  EXPECT_FALSE(rep.hasFinding(finding::LayerRopeTheta)) << rep.toText();
  EXPECT_TRUE(rep.hasFinding(finding::QkNormOrder)) << rep.toText();
}

TEST(LayerRopeTheta, ACleanRunAndACheckpointWithOneRope) {
  auto model = Model::load(gemma3());
  const AuditReport clean = Auditor::audit(*model, test::runWithFaults(gemma3(), {})).report;
  EXPECT_TRUE(clean.findings.empty()) << clean.toText();
  try {
    test::runWithFaults(test::fixture("families/models/gemma2"), {"layer_rope_theta"});
    FAIL() << "Gemma 2's layers share one RoPE";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("RoPE of their own"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gemma2"), std::string::npos) << e.what();
  }
}

}  // namespace
