// GPT-OSS's config keys as transformers reads them (GptOssConfig's defaults: YaRN over 4096
// positions when the file names no RoPE, even layers sliding, q/k/v/o biases, sinks, the
// expert count under either name) and what it refuses, naming the field; the engine's two
// faults the family brings (sink_dropped, yarn_attention_factor) found by the audit at the
// step and layer they fire, on the fixture written by real transformers 5.17. The numerics
// against transformers are FamilyGoldenTest's (tests/fixtures/families/models/gpt_oss).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "AuditExpectations.hpp"
#include "ConfigRefusal.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "kvscope/ModelConfig.hpp"

using namespace kvscope;

namespace {

std::string gptOss() { return test::fixture("families/models/gpt_oss"); }

nlohmann::json minimalGptOss() {
  return {{"model_type", "gpt_oss"}, {"vocab_size", 100}, {"hidden_size", 64},
          {"num_attention_heads", 16}, {"num_hidden_layers", 4}, {"intermediate_size", 32},
          {"max_position_embeddings", 8192}};
}

TEST(GptOssFamily, AbsentKeysTakeGptOssConfigsDefaults) {
  const ModelConfig c = ModelConfig::fromJson(minimalGptOss(), "config.json");
  EXPECT_EQ(c.architecture, Architecture::GptOss);
  EXPECT_EQ(c.headDim, 64);
  EXPECT_EQ(c.numKvHeads, 8);  // not num_attention_heads: GptOssConfig's own default
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_EQ(c.rope.theta, 150000.0);
  EXPECT_EQ(c.rope.factor, 32.0);
  EXPECT_EQ(c.rope.originalMaxPositions, 4096);
  EXPECT_FALSE(c.rope.truncate);
  EXPECT_DOUBLE_EQ(c.normEps, 1e-5);
  EXPECT_TRUE(c.qkvBias);
  EXPECT_TRUE(c.outputProjBias);
  EXPECT_TRUE(c.attentionSinks);
  EXPECT_EQ(c.slidingWindow, 128);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(c.isSlidingLayer(i), i % 2 == 0) << i;
    EXPECT_TRUE(c.isMoeLayer(i)) << i;
  }
  EXPECT_EQ(c.moe.numExperts, 128);
  EXPECT_EQ(c.moe.topK, 4);
  EXPECT_EQ(c.moe.intermediateSize, 32);
  EXPECT_EQ(c.moe.routing, MoeConfig::Routing::TopKThenSoftmax);
  EXPECT_EQ(c.moe.expert, MoeConfig::Expert::ClampedGlu);
}

TEST(GptOssFamily, TheFixturesConfigAndBothNamesOfTheExpertCount) {
  const ModelConfig f = ModelConfig::load(gptOss() + "/config.json");
  EXPECT_EQ(f.moe.numExperts, 4);
  EXPECT_EQ(f.moe.topK, 2);
  EXPECT_EQ(f.slidingWindow, 6);
  EXPECT_TRUE(f.isSlidingLayer(0));
  EXPECT_FALSE(f.isSlidingLayer(1));
  auto doc = minimalGptOss();
  doc["num_experts"] = 8;
  doc["num_experts_per_tok"] = 2;
  EXPECT_EQ(ModelConfig::fromJson(doc, "config.json").moe.numExperts, 8);
  doc["num_experts_per_tok"] = 9;
  const std::string e = test::configRefusal(doc);
  EXPECT_NE(e.find("num_experts_per_tok"), std::string::npos) << e;
  EXPECT_NE(e.find("dir/config.json"), std::string::npos) << e;
}

TEST(GptOssFamily, RowsAreKvScopesAdditions) {
  EXPECT_NE(FailureMatrix::row(finding::SinkDropped).observation.find("sinks"), std::string::npos);
  EXPECT_NE(FailureMatrix::row(finding::YarnAttentionFactor).observation.find("yarn"), std::string::npos);
  test::expectAdditionAfter(finding::SinkDropped, finding::PartialRotary);
  test::expectAdditionAfter(finding::YarnAttentionFactor, finding::SinkDropped);
}

TEST(SinkDropped, EveryLayerWithoutSinksIsFoundAtLayer0Position0) {
  auto model = Model::load(gptOss());
  const AuditReport rep = Auditor::audit(*model, test::runWithFaults(gptOss(), {"sink_dropped"})).report;
  const Finding& f = test::onlyFinding(rep, finding::SinkDropped);
  EXPECT_EQ(f.step, 0);
  EXPECT_EQ(f.layer, 0);     // the layer whose attention ran without its sinks
  EXPECT_EQ(f.position, 0);  // a sink takes its share even from one key
  EXPECT_EQ(f.evidence.at("record_layer"), 1.0);
  EXPECT_EQ(f.evidence.at("sinkless_layers_above"), 1.0);
  EXPECT_LE(f.evidence.at("hypothesis_error"), f.evidence.at("tolerance"));
  EXPECT_LE(f.evidence.at("sinkless_layer_record_error"), f.evidence.at("tolerance"));
  EXPECT_FALSE(rep.hasFinding(finding::SoftcapDropped)) << rep.toText();
}

TEST(SinkDropped, OneFullLayerFromADecodeStep) {
  auto model = Model::load(gptOss());
  const AuditReport rep =
      Auditor::audit(*model, test::runWithFaults(gptOss(), {"sink_dropped:layer=1,step=2"})).report;
  // (A sink's share of one query's softmax can be small enough to stay under the tolerance:
  // from step 3 on this layer the run audits clean, the sinks' absence unseen.)
  const Finding& f = test::onlyFinding(rep, finding::SinkDropped);
  EXPECT_EQ(f.step, 2);
  EXPECT_EQ(f.layer, 1);
  EXPECT_EQ(f.evidence.at("record_layer"), 2.0);
  EXPECT_EQ(f.evidence.at("sinkless_layers_above"), 0.0);  // layer 1 alone
}

TEST(SinkDropped, ACleanRunAndACheckpointWithoutSinks) {
  auto model = Model::load(gptOss());
  const AuditReport clean = Auditor::audit(*model, test::runWithFaults(gptOss(), {})).report;
  EXPECT_TRUE(clean.findings.empty()) << clean.toText();
  try {
    test::runWithFaults(test::fixture("families/models/gemma2"), {"sink_dropped"});
    FAIL() << "a gemma2 checkpoint has no sinks";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("self_attn.sinks"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gemma2"), std::string::npos) << e.what();
  }
}

TEST(YarnAttentionFactor, TheFactorDroppedEverywhereIsFoundAtLayer0Position0) {
  auto model = Model::load(gptOss());
  const AuditReport rep =
      Auditor::audit(*model, test::runWithFaults(gptOss(), {"yarn_attention_factor"})).report;
  const Finding& f = test::onlyFinding(rep, finding::YarnAttentionFactor);
  EXPECT_EQ(f.step, 0);
  EXPECT_EQ(f.layer, 0);
  EXPECT_EQ(f.position, 0);  // the factor scales every position
  EXPECT_EQ(f.evidence.at("hypothesis"), 1.0);
  EXPECT_NEAR(f.evidence.at("checkpoint_attention_factor"), 1.3465735902799727, 1e-12);
  EXPECT_EQ(f.evidence.at("path_attention_factor"), 1.0);
  EXPECT_LE(f.evidence.at("rescaled_key_error"), f.evidence.at("tolerance"));
}

TEST(YarnAttentionFactor, OneLayerFromADecodeStepAndACheckpointWithoutAFactor) {
  auto model = Model::load(gptOss());
  const AuditReport rep = Auditor::audit(
      *model, test::runWithFaults(gptOss(), {"yarn_attention_factor:layer=1,step=2"})).report;
  const Finding& f = test::onlyFinding(rep, finding::YarnAttentionFactor);
  EXPECT_EQ(f.step, 2);
  EXPECT_EQ(f.layer, 1);
  EXPECT_FALSE(rep.hasFinding(finding::RopeScaling)) << rep.toText();
  try {
    test::runWithFaults(test::fixture("families/models/qwen3"), {"yarn_attention_factor"});
    FAIL() << "a qwen3 checkpoint with default RoPE has no attention factor";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("attention factor"), std::string::npos) << e.what();
  }
}

// rope_scaling on a yarn checkpoint: the path turns with rope_theta's frequencies and without
// yarn's attention factor. The row re-derives yarn (its blended frequencies and the factor on
// cos/sin) instead of leaving the run to `reference`.
TEST(RopeScalingOnYarn, TheDroppedYarnIsFoundWithItsAttentionFactor) {
  auto model = Model::load(gptOss());
  const AuditReport every = Auditor::audit(*model, test::runWithFaults(gptOss(), {"rope_scaling"})).report;
  const Finding& f = test::onlyFinding(every, finding::RopeScaling);
  EXPECT_EQ(f.step, 1);  // the fault's default first step
  EXPECT_EQ(f.evidence.at("hypothesis"), 1.0);
  EXPECT_LE(f.evidence.at("rerotated_key_error"), f.evidence.at("tolerance"));
  EXPECT_GT(f.evidence.at("own_reference_error"), f.evidence.at("tolerance"));
  EXPECT_NE(f.explanation.find("attention factor"), std::string::npos) << f.explanation;
  EXPECT_NEAR(f.evidence.at("key_length_ratio"), 1.0 / 1.3465735902799727, 1e-12);
  EXPECT_FALSE(every.hasFinding(finding::YarnAttentionFactor)) << every.toText();

  const AuditReport one =
      Auditor::audit(*model, test::runWithFaults(gptOss(), {"rope_scaling:layer=1,step=2"})).report;
  const Finding& g = test::onlyFinding(one, finding::RopeScaling);
  EXPECT_EQ(g.step, 2);
  EXPECT_EQ(g.layer, 1);
}

}  // namespace
