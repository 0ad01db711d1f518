// Qwen3.5-MoE's config keys as transformers reads them (Qwen3_5MoeTextConfig's defaults: 2 KV
// heads, 256 experts of 512, 8 per token, always renormalised, a gated shared expert of 512 on
// every layer, no intermediate_size) and what it refuses, naming the field (keys transformers
// ignores that say otherwise than it runs); the released wrapper (qwen3_5_moe); on the fixture
// written by real transformers 5.17 a clean run, and a speculative one that rolls its recurrent
// states back, audit clean. The numerics against transformers are FamilyGoldenTest's
// (tests/fixtures/families/models/qwen3_5_moe_text).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "AuditExpectations.hpp"
#include "ConfigRefusal.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/ModelConfig.hpp"

using namespace kvscope;

namespace {

std::string qwen3_5MoeDir() { return test::fixture("families/models/qwen3_5_moe_text"); }

nlohmann::json minimalQwen3_5Moe() {
  return {{"model_type", "qwen3_5_moe_text"}, {"vocab_size", 100}, {"hidden_size", 64}, {"num_attention_heads", 4},
          {"num_hidden_layers", 4}, {"max_position_embeddings", 4096}};
}

TEST(Qwen3_5MoeFamily, AbsentKeysTakeQwen3_5MoeTextConfigsDefaults) {
  const ModelConfig c = ModelConfig::fromJson(minimalQwen3_5Moe(), "config.json");
  EXPECT_EQ(c.architecture, Architecture::Qwen3_5Moe);
  EXPECT_EQ(c.numKvHeads, 2);
  EXPECT_EQ(c.headDim, 256);
  EXPECT_TRUE(c.attentionOutputGate);
  EXPECT_EQ(c.deltaNet.layers, (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(c.moe.numExperts, 256);
  EXPECT_EQ(c.moe.topK, 8);
  EXPECT_EQ(c.moe.intermediateSize, 512);
  EXPECT_TRUE(c.moe.normTopK);
  EXPECT_EQ(c.moe.sharedIntermediateSize, 512);
  EXPECT_TRUE(c.moe.sharedExpertGate);
  for (int64_t l = 0; l < c.numLayers; ++l) EXPECT_TRUE(c.isMoeLayer(l)) << l;
}

// Keys transformers' Qwen3.5-MoE ignores are read where they agree with what it runs and
// refused where they do not; the released checkpoint's text model sits under text_config.
TEST(Qwen3_5MoeFamily, KeysItIgnoresMustAgreeAndTheReleasedWrapperLoads) {
  auto doc = minimalQwen3_5Moe();
  doc["norm_topk_prob"] = true;
  doc["decoder_sparse_step"] = 1;
  doc["mlp_only_layers"] = nlohmann::json::array();
  EXPECT_EQ(test::configRefusal(doc), "");
  doc["mlp_only_layers"] = {1};
  EXPECT_NE(test::configRefusal(doc).find("mlp_only_layers"), std::string::npos) << test::configRefusal(doc);
  doc["mlp_only_layers"] = nlohmann::json::array();
  doc["decoder_sparse_step"] = 2;
  EXPECT_NE(test::configRefusal(doc).find("decoder_sparse_step"), std::string::npos);
  doc["decoder_sparse_step"] = 1;
  doc["norm_topk_prob"] = false;
  EXPECT_NE(test::configRefusal(doc).find("norm_topk_prob"), std::string::npos);
  doc["norm_topk_prob"] = true;
  doc["num_experts"] = 0;
  EXPECT_NE(test::configRefusal(doc).find("num_experts"), std::string::npos);
  const nlohmann::json wrapper = {
      {"model_type", "qwen3_5_moe"}, {"text_config", minimalQwen3_5Moe()}, {"tie_word_embeddings", false}};
  const ModelConfig c = ModelConfig::fromJson(wrapper, "config.json");
  EXPECT_EQ(c.wrapperModelType, "qwen3_5_moe");
  EXPECT_EQ(c.architecture, Architecture::Qwen3_5Moe);
}

TEST(Qwen3_5MoeFamily, CleanAndSpeculativeRunsAuditCleanWithTheirStatesAndExperts) {
  auto model = Model::load(qwen3_5MoeDir());
  const Trace t = test::writtenAndRead(test::runWithFaults(qwen3_5MoeDir(), {}), "qwen3_5_moe", "clean.kvtrace");
  EXPECT_EQ(t.recurrentLayers(), (std::vector<int64_t>{0, 2}));
  ASSERT_FALSE(t.steps.empty());
  EXPECT_FALSE(t.steps[0].experts.empty());
  const AuditReport rep = Auditor::audit(*model, t).report;
  EXPECT_TRUE(rep.findings.empty()) << rep.toText();
  RequestSpec s;
  s.promptIds = {5, 17, 300, 41, 5, 17, 300, 41, 5, 17};
  s.maxNewTokens = 10;
  s.stopAtEos = false;
  EngineOptions o;
  o.speculativeDrafts = 2;
  const Trace spec = Engine(model).run({s}, o);
  EXPECT_EQ(spec.requests[0].generated, Engine(model).run({s}, {}).requests[0].generated);
  const AuditReport specReport = Auditor::audit(*model, spec).report;
  EXPECT_TRUE(specReport.findings.empty()) << specReport.toText();
}

}  // namespace
