// Qwen3-Next's config keys as transformers reads them (Qwen3NextConfig's defaults: 2 KV heads,
// 512 experts of 512, 10 per token, renormalised, a gated shared expert of 512; the Qwen3.5
// layer pattern) and what it refuses, naming the field; its fused DeltaNet projections read in
// transformers' per-key-head-group order and its recurrent layers in the trace, on the fixture
// written by real transformers 5.17. The numerics against transformers are FamilyGoldenTest's
// (tests/fixtures/families/models/qwen3_next).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "AuditExpectations.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/ModelConfig.hpp"
#include "model/ModelImpl.hpp"

using namespace kvscope;

namespace {

std::string qwen3Next() { return test::fixture("families/models/qwen3_next"); }

nlohmann::json minimalQwen3Next() {
  return {{"model_type", "qwen3_next"}, {"vocab_size", 100}, {"hidden_size", 64}, {"num_attention_heads", 4},
          {"num_hidden_layers", 4}, {"intermediate_size", 32}, {"max_position_embeddings", 4096}};
}

TEST(Qwen3NextFamily, AbsentKeysTakeQwen3NextConfigsDefaults) {
  const ModelConfig c = ModelConfig::fromJson(minimalQwen3Next(), "config.json");
  EXPECT_EQ(c.architecture, Architecture::Qwen3Next);
  EXPECT_EQ(c.numKvHeads, 2);
  EXPECT_EQ(c.headDim, 256);
  EXPECT_DOUBLE_EQ(c.rope.partialRotaryFactor, 0.25);
  EXPECT_TRUE(c.attentionOutputGate);
  EXPECT_EQ(c.recipe.norm, BlockRecipe::Norm::RmsNormPlusOne);
  EXPECT_EQ(c.deltaNet.layers, (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(c.moe.numExperts, 512);
  EXPECT_EQ(c.moe.topK, 10);
  EXPECT_EQ(c.moe.intermediateSize, 512);
  EXPECT_TRUE(c.moe.normTopK);
  EXPECT_EQ(c.moe.sharedIntermediateSize, 512);
  EXPECT_TRUE(c.moe.sharedExpertGate);
  EXPECT_EQ(c.moe.layers, std::vector<bool>(4, true));  // decoder_sparse_step 1
  auto doc = minimalQwen3Next();
  doc["mlp_only_layers"] = {7};
  try {
    ModelConfig::fromJson(doc, "dir/config.json");
    ADD_FAILURE() << "layer 7 is not a layer of 4";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("mlp_only_layers"), std::string::npos) << e.what();
  }
}

// transformers' fix_query_key_value_ordering: per key-head group [q Dk | k Dk | v g Dv | z g Dv]
// and [b g | a g] (g = value heads per key head), read back as q | k | v | z and b | a.
TEST(Qwen3NextFamily, TheFusedProjectionsAreReadInTransformersGroupOrder) {
  auto model = Model::load(qwen3Next());
  const ModelImpl& m = model->impl();
  const DeltaNetConfig& d = m.config.deltaNet;  // 2 key heads of 8, 4 value heads of 8: g = 2
  ASSERT_EQ(d.keyHeads, 2);
  ASSERT_EQ(d.valueHeads, 4);
  const auto order = m.dnQkvzOrder;
  ASSERT_EQ(order.size(0), 2 * 2 * 8 + 2 * 4 * 8);
  const int64_t group = 2 * 8 + 2 * 2 * 8;  // 48 rows per key head
  EXPECT_EQ(order[0].item<int64_t>(), 0);           // q of key head 0
  EXPECT_EQ(order[8].item<int64_t>(), group);       // q of key head 1
  EXPECT_EQ(order[16].item<int64_t>(), 8);          // k of key head 0
  EXPECT_EQ(order[32].item<int64_t>(), 16);         // v of key head 0 (value heads 0, 1)
  EXPECT_EQ(order[48].item<int64_t>(), group + 16); // v of key head 1 (value heads 2, 3)
  EXPECT_EQ(order[64].item<int64_t>(), 32);         // z of key head 0
  EXPECT_EQ(m.dnBaOrder.size(0), 8);
  EXPECT_EQ(m.dnBaOrder[2].item<int64_t>(), 4);     // b of key head 1
  EXPECT_EQ(m.dnBaOrder[4].item<int64_t>(), 2);     // a of key head 0
}

TEST(Qwen3NextFamily, ACleanRunAuditsCleanWithItsRecurrentStates) {
  const Trace t = test::writtenAndRead(test::runWithFaults(qwen3Next(), {}), "qwen3_next", "clean.kvtrace");
  EXPECT_EQ(t.recurrentLayers(), (std::vector<int64_t>{0, 2}));
  auto model = Model::load(qwen3Next());
  const AuditReport rep = Auditor::audit(*model, t).report;
  EXPECT_TRUE(rep.findings.empty()) << rep.toText();
}

}  // namespace
