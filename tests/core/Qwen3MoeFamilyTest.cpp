// Qwen3-MoE's config keys as transformers reads them (Qwen3MoeConfig's defaults, num_experts
// under the Hub's name or transformers 5's num_local_experts, decoder_sparse_step and
// mlp_only_layers choosing the MoE layers) and what it refuses, naming the field. The numerics
// against real transformers are FamilyGoldenTest's (tests/fixtures/families/models/qwen3_moe).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kvscope/Error.hpp"
#include "kvscope/ModelConfig.hpp"

using namespace kvscope;

namespace {

nlohmann::json minimalQwen3Moe() {
  return {{"model_type", "qwen3_moe"}, {"vocab_size", 100}, {"hidden_size", 64},
          {"num_attention_heads", 4}, {"num_hidden_layers", 4}, {"intermediate_size", 128},
          {"max_position_embeddings", 512}};
}

std::string refusal(const nlohmann::json& doc) {
  try {
    ModelConfig::fromJson(doc, "dir/config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Qwen3MoeFamily, AbsentKeysTakeQwen3MoeConfigsDefaults) {
  const ModelConfig c = ModelConfig::fromJson(minimalQwen3Moe(), "config.json");
  EXPECT_EQ(c.architecture, Architecture::Qwen3Moe);
  EXPECT_EQ(c.moe.numExperts, 128);
  EXPECT_EQ(c.moe.topK, 8);
  EXPECT_EQ(c.moe.intermediateSize, 768);
  EXPECT_FALSE(c.moe.normTopK);
  EXPECT_EQ(c.numKvHeads, 4);
  EXPECT_TRUE(c.qkNorm);
  for (int64_t i = 0; i < 4; ++i) EXPECT_TRUE(c.isMoeLayer(i)) << i;
}

TEST(Qwen3MoeFamily, TheMoeLayersAndBothNamesOfTheExpertCount) {
  auto doc = minimalQwen3Moe();
  doc["num_local_experts"] = 6;  // transformers 5's name
  doc["num_experts_per_tok"] = 2;
  doc["decoder_sparse_step"] = 2;  // layers 1, 3
  doc["mlp_only_layers"] = {3};
  ModelConfig c = ModelConfig::fromJson(doc, "config.json");
  EXPECT_EQ(c.moe.numExperts, 6);
  EXPECT_EQ(c.moe.layers, (std::vector<bool>{false, true, false, false}));
  doc["num_experts"] = 8;  // the Hub's name wins where both are there
  c = ModelConfig::fromJson(doc, "config.json");
  EXPECT_EQ(c.moe.numExperts, 8);
  doc["num_experts"] = 0;  // no experts: every layer dense
  c = ModelConfig::fromJson(doc, "config.json");
  for (int64_t i = 0; i < 4; ++i) EXPECT_FALSE(c.isMoeLayer(i)) << i;
}

TEST(Qwen3MoeFamily, RefusesWhatItCannotRunNamingTheField) {
  const std::pair<const char*, nlohmann::json> bad[] = {
      {"num_experts_per_tok", 200}, {"decoder_sparse_step", 0}, {"num_experts", -1},
      {"mlp_only_layers", nlohmann::json::array({7})}};
  for (const auto& [key, value] : bad) {
    auto doc = minimalQwen3Moe();
    doc[key] = value;
    const std::string e = refusal(doc);
    EXPECT_NE(e.find(key), std::string::npos) << key << ": " << e;
    EXPECT_NE(e.find("dir/config.json"), std::string::npos) << e;
  }
}

}  // namespace
