// DeepSeek V2's config keys as transformers 5 reads them (DeepseekV2Config's defaults: 64 experts
// chosen greedily by softmax probability, 2 shared experts, no dense layer, no default for
// num_experts_per_tok) and what it refuses, naming the field; its routing (group_limited_greedy:
// a group scores its best probability; the weights the plain probabilities x
// routed_scaling_factor, never renormalised); on the fixture written by real transformers 5.17
// (no query LoRA, k_pe turned in place as complex pairs) a clean run audits clean and faults are
// found under their rows. The numerics against transformers are FamilyGoldenTest's
// (tests/fixtures/families/models/deepseek_v2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "AuditExpectations.hpp"
#include "ConfigRefusal.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FaultSpec.hpp"
#include "kvscope/ModelConfig.hpp"
#include "kvscope/TraceFile.hpp"
#include "model/ExpertRouter.hpp"

using namespace kvscope;

namespace {

std::string deepseekV2Dir() { return test::fixture("families/models/deepseek_v2"); }

nlohmann::json minimalDeepseekV2() {
  return {{"model_type", "deepseek_v2"},  {"vocab_size", 100},          {"hidden_size", 64},
          {"num_attention_heads", 4},     {"num_hidden_layers", 3},     {"intermediate_size", 96},
          {"max_position_embeddings", 4096}, {"num_experts_per_tok", 6}};
}

TEST(DeepseekV2Family, AbsentKeysTakeDeepseekV2ConfigsDefaults) {
  const ModelConfig c = ModelConfig::fromJson(minimalDeepseekV2(), "config.json");
  EXPECT_EQ(c.architecture, Architecture::DeepseekV2);
  EXPECT_EQ(c.mla.kvLoraRank, 512);
  EXPECT_EQ(c.mla.qLoraRank, 1536);
  EXPECT_EQ(c.mla.ropeDim, 64);
  EXPECT_EQ(c.mla.ropePairs, MlaConfig::RopePairs::InPlacePairs);
  EXPECT_EQ(c.numKvHeads, 1);
  EXPECT_EQ(c.headDim, 512);
  EXPECT_EQ(c.cacheValueDim(), 64);
  EXPECT_EQ(c.moe.numExperts, 64);
  EXPECT_EQ(c.moe.topK, 6);
  EXPECT_EQ(c.moe.routing, MoeConfig::Routing::SoftmaxThenTopK);  // topk_method "greedy"
  EXPECT_FALSE(c.moe.normTopK);
  EXPECT_DOUBLE_EQ(c.moe.routedScale, 1.0);
  EXPECT_EQ(c.moe.sharedIntermediateSize, 2 * 1407);
  EXPECT_EQ(c.moe.layers, (std::vector<bool>{true, true, true}));  // first_k_dense_replace 0
  EXPECT_NE(c.layerDescription(0).find("pairs (2i, 2i+1)"), std::string::npos) << c.layerDescription(0);
}

TEST(DeepseekV2Family, GroupLimitedGreedyReadsTheGroupsAndNormTopKProbIsNotApplied) {
  auto doc = minimalDeepseekV2();
  doc["topk_method"] = "group_limited_greedy";
  doc["n_group"] = 8;
  doc["topk_group"] = 3;
  doc["norm_topk_prob"] = true;  // transformers' DeepseekV2TopkRouter never renormalises
  doc["routed_scaling_factor"] = 16.0;
  const ModelConfig c = ModelConfig::fromJson(doc, "config.json");
  EXPECT_EQ(c.moe.routing, MoeConfig::Routing::SoftmaxGroupLimited);
  EXPECT_EQ(c.moe.groups, 8);
  EXPECT_EQ(c.moe.topGroups, 3);
  EXPECT_FALSE(c.moe.normTopK);
  EXPECT_DOUBLE_EQ(c.moe.routedScale, 16.0);
}

TEST(DeepseekV2Family, WhatTransformersCannotRouteIsRefusedNamingTheField) {
  auto doc = minimalDeepseekV2();
  doc["topk_method"] = "noaux_tc";
  EXPECT_NE(test::configRefusal(doc).find("topk_method"), std::string::npos) << test::configRefusal(doc);
  doc = minimalDeepseekV2();
  doc.erase("num_experts_per_tok");
  EXPECT_NE(test::configRefusal(doc).find("num_experts_per_tok"), std::string::npos) << test::configRefusal(doc);
  doc = minimalDeepseekV2();
  doc["topk_method"] = "group_limited_greedy";
  doc["n_group"] = 5;  // 64 experts
  EXPECT_NE(test::configRefusal(doc).find("n_group"), std::string::npos) << test::configRefusal(doc);
  doc["n_group"] = 8;
  doc["topk_group"] = 0;
  EXPECT_NE(test::configRefusal(doc).find("topk_group"), std::string::npos) << test::configRefusal(doc);
  // DeepseekV2Config's n_group and topk_group default to None (V3's to 8 and 4): a grouped
  // routing without them is refused, not routed over V3's groups.
  doc.erase("topk_group");
  EXPECT_NE(test::configRefusal(doc).find("topk_group"), std::string::npos) << test::configRefusal(doc);
  doc.erase("n_group");
  doc["topk_group"] = 2;
  EXPECT_NE(test::configRefusal(doc).find("n_group"), std::string::npos) << test::configRefusal(doc);
  doc = minimalDeepseekV2();
  doc["qk_rope_head_dim"] = 7;
  EXPECT_NE(test::configRefusal(doc).find("qk_rope_head_dim"), std::string::npos) << test::configRefusal(doc);
}

// group_limited_greedy: 6 experts in 3 groups of 2, one group kept. A group scores its best
// probability (not the sum of its two best, V3's rule): group 0 holds the single most probable
// expert, group 1 the second and third, so group 0 is kept although group 1's pair sums higher.
TEST(DeepseekV2Family, AGroupScoresItsBestProbabilityAndTheWeightsAreScaledNotRenormalised) {
  MoeConfig moe;
  moe.numExperts = 6;
  moe.topK = 2;
  moe.routing = MoeConfig::Routing::SoftmaxGroupLimited;
  moe.groups = 3;
  moe.topGroups = 1;
  moe.routedScale = 2.0;
  const torch::Tensor logits = torch::tensor({{3.0f, -4.0f, 2.9f, 2.8f, 0.0f, -1.0f}});
  const kvscope::detail::ExpertRouter router(moe);
  const torch::Tensor experts = router.topExperts(logits, {});
  auto chosen = experts.sort(-1);
  EXPECT_TRUE(torch::equal(std::get<0>(chosen), torch::tensor({{0L, 1L}}))) << experts;
  const torch::Tensor probs = torch::softmax(logits, -1);
  const torch::Tensor w = router.weights(logits, experts);
  EXPECT_TRUE(torch::allclose(w, probs.gather(1, experts) * 2.0)) << w;
}

TEST(DeepseekV2Family, TheRopedKeyPartsStayInterleavedAndCleanRunsAuditClean) {
  auto model = Model::load(deepseekV2Dir());
  EXPECT_EQ(model->config().mla.qLoraRank, 0);
  const Trace t = test::writtenAndRead(test::runWithFaults(deepseekV2Dir(), {}), "deepseek_v2", "clean.kvtrace");
  EXPECT_EQ(t.model.numKvHeads, 1);
  EXPECT_EQ(t.model.headDim, 32);
  EXPECT_EQ(t.model.valueDim(), 8);
  for (const auto& k : t.layerKinds) EXPECT_TRUE(k.latent);
  const AuditReport rep = Auditor::audit(*model, t).report;
  EXPECT_TRUE(rep.findings.empty()) << rep.toText();

  RequestSpec s;
  s.promptIds = {5, 17, 300, 41, 5, 17, 300, 41, 5, 17};
  s.maxNewTokens = 8;
  s.stopAtEos = false;
  EngineOptions spec;
  spec.speculativeDrafts = 2;
  const Trace drafted = Engine(model).run({s}, spec);
  EXPECT_EQ(drafted.requests[0].generated, Engine(model).run({s}, {}).requests[0].generated);
  EXPECT_TRUE(Auditor::audit(*model, drafted).report.findings.empty());
}

TEST(DeepseekV2Family, FaultsAreFoundUnderTheirRows) {
  auto model = Model::load(deepseekV2Dir());
  // Each report named: onlyFinding returns a reference into it.
  const AuditReport absorbed = Auditor::audit(*model, test::runWithFaults(deepseekV2Dir(), {"mla_absorb:layer=2"})).report;
  const Finding& absorb = test::onlyFinding(absorbed, "mla_absorb");
  EXPECT_EQ(absorb.step, 1);
  EXPECT_EQ(absorb.layer, 2);
  // (The fixture's yarn has mscale = mscale_all_dim, as DeepSeek ships it: cos and sin carry no
  // attention factor, the whole mscale^2 is on the scores; yarn_attention_factor cannot apply.)
  const AuditReport wrongRep =
      Auditor::audit(*model, test::runWithFaults(deepseekV2Dir(), {"wrong_layer:layer=2,source=1"})).report;
  const Finding& wrong = test::onlyFinding(wrongRep, "wrong_layer");
  EXPECT_EQ(wrong.layer, 2);
}

// --mla-absorbed: decode steps attend over the latent rows with kv_b_proj folded in per head, as
// serving engines decode. The same attention up to rounding: tokens equal, logits within 1e-4 of
// the materialised decode (and not bit-equal: the other form ran), the audit clean, on both
// DeepSeek families; with the mla_absorb fault on top, still found at the first decode step.
TEST(DeepseekV2Family, TheAbsorbedDecodeEqualsTheMaterialisedOneAndAuditsClean) {
  for (const char* family : {"deepseek_v2", "deepseek_v3"}) {
    SCOPED_TRACE(family);
    const std::string dir = test::fixture(std::string("families/models/") + family);
    auto model = Model::load(dir);
    RequestSpec s;
    s.promptIds = {5, 17, 300, 41, 99, 7};
    s.maxNewTokens = 6;
    s.stopAtEos = false;
    EngineOptions absorbed;
    absorbed.mlaAbsorbedDecode = true;
    const Trace a = Engine(model).run({s}, absorbed);
    const Trace m = Engine(model).run({s}, {});
    EXPECT_EQ(a.requests[0].generated, m.requests[0].generated);
    ASSERT_EQ(a.steps.size(), m.steps.size());
    double most = 0.0;
    for (size_t i = 0; i < a.steps.size(); ++i)
      for (size_t j = 0; j < a.steps[i].logits.data.size(); ++j)
        most = std::max(most, static_cast<double>(std::fabs(a.steps[i].logits.data[j] - m.steps[i].logits.data[j])));
    EXPECT_LE(most, 1e-4);
    EXPECT_GT(most, 0.0) << "the absorbed decode computed bit for bit what the materialised one did";
    const AuditReport rep = Auditor::audit(*model, a).report;
    EXPECT_TRUE(rep.findings.empty()) << rep.toText();

    absorbed.faults = {FaultSpec::parse("mla_absorb:layer=1")};
    const AuditReport faulty = Auditor::audit(*model, Engine(model).run({s}, absorbed)).report;
    const Finding& f = test::onlyFinding(faulty, "mla_absorb");
    EXPECT_EQ(f.step, 1);
    EXPECT_EQ(f.layer, 1);
  }
  RequestSpec s;
  s.promptIds = {5, 17, 300};
  s.maxNewTokens = 2;
  EngineOptions absorbed;
  absorbed.mlaAbsorbedDecode = true;
  try {
    Engine(Model::load(test::fixture("families/models/qwen3"))).run({s}, absorbed);
    FAIL() << "--mla-absorbed ran on a model without latent attention";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("kv_lora_rank"), std::string::npos) << e.what();
  }
}

// score_mscale: the softmax scale without yarn's mscale(factor, mscale_all_dim)^2, as
// transformers 4.57's DeepseekV2Attention scores (test_live_deepseek records it there). On the
// fixture (yarn x 4, mscale_all_dim 0.707) the scale is 1.21 times qk_head_dim^-0.5.
TEST(ScoreMscale, AScaleWithoutYarnsMscaleIsFoundFromThePrefill) {
  auto model = Model::load(deepseekV2Dir());
  EXPECT_NEAR(model->config().mla.scoreMscale, std::pow(0.1 * 0.707 * std::log(4.0) + 1.0, 2), 1e-12);
  const AuditReport every = Auditor::audit(*model, test::runWithFaults(deepseekV2Dir(), {"score_mscale"})).report;
  const Finding& f = test::onlyFinding(every, finding::ScoreMscale);
  EXPECT_EQ(f.step, 0);
  EXPECT_EQ(f.layer, 0);
  EXPECT_EQ(f.evidence.at("unscaled_softmax_layers_above"), 1.0);
  EXPECT_LE(f.evidence.at("hypothesis_error"), f.evidence.at("tolerance"));

  const AuditReport one =
      Auditor::audit(*model, test::runWithFaults(deepseekV2Dir(), {"score_mscale:layer=1,step=2"})).report;
  const Finding& g = test::onlyFinding(one, finding::ScoreMscale);
  EXPECT_EQ(g.step, 2);
  EXPECT_EQ(g.layer, 1);
  EXPECT_EQ(g.evidence.at("unscaled_softmax_layers_above"), 0.0);
  try {
    test::runWithFaults(test::fixture("families/models/qwen3"), {"score_mscale"});
    FAIL() << "a qwen3 checkpoint's scale carries no mscale";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("mscale"), std::string::npos) << e.what();
  }
}

}  // namespace
