// Gemma 3 text's config keys as transformers reads them (Gemma3TextConfig's defaults where
// save_pretrained left a key out; the local RoPE from rope_local_base_freq in transformers 4
// and from rope_parameters.sliding_attention in 5; layer_types, else sliding_window_pattern)
// and what it refuses. The numerics against real transformers are FamilyGoldenTest's
// (tests/fixtures/families/models/gemma3_text: a linear-scaled global RoPE at theta 1e6 beside
// unscaled local layers at 10000).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kvscope/Error.hpp"
#include "kvscope/ModelConfig.hpp"

using namespace kvscope;

namespace {

nlohmann::json minimalGemma3() {
  return {{"model_type", "gemma3_text"}, {"vocab_size", 100}, {"hidden_size", 60},
          {"num_attention_heads", 8}, {"num_hidden_layers", 7}, {"intermediate_size", 128},
          {"max_position_embeddings", 8192}};
}

std::string refusal(const nlohmann::json& doc) {
  try {
    ModelConfig::fromJson(doc, "dir/config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Gemma3Family, AbsentKeysTakeGemma3TextConfigsDefaults) {
  const ModelConfig c = ModelConfig::fromJson(minimalGemma3(), "config.json");
  EXPECT_EQ(c.architecture, Architecture::Gemma3);
  EXPECT_EQ(c.headDim, 256);  // hidden 60 is not divisible by 8 heads: head_dim's default
  EXPECT_EQ(c.numKvHeads, 4);
  EXPECT_DOUBLE_EQ(c.attentionScale, 1.0 / 16.0);  // query_pre_attn_scalar 256
  EXPECT_EQ(c.attnLogitSoftcap, 0.0);              // Gemma 3 has none unless named
  EXPECT_EQ(c.finalLogitSoftcap, 0.0);
  EXPECT_TRUE(c.qkNorm);
  EXPECT_TRUE(c.tieWordEmbeddings);
  EXPECT_EQ(c.recipe.norm, BlockRecipe::Norm::RmsNormPlusOne);
  EXPECT_EQ(c.slidingWindow, 4096);
  // sliding_window_pattern 6: every sixth layer is global.
  EXPECT_EQ(c.slidingLayers, (std::vector<bool>{true, true, true, true, true, false, true}));
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.rope.type, "default");
  ASSERT_TRUE(c.slidingRope.has_value());
  EXPECT_EQ(c.slidingRope->theta, 10000.0);
  EXPECT_EQ(&c.ropeFor(0), &*c.slidingRope);
  EXPECT_EQ(&c.ropeFor(5), &c.rope);
}

TEST(Gemma3Family, Transformers4And5KeysGiveTheSameTwoRopes) {
  auto v4 = minimalGemma3();
  v4["rope_theta"] = 1e6;
  v4["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  v4["rope_local_base_freq"] = 20000.0;
  v4["sliding_window_pattern"] = 2;
  const ModelConfig a = ModelConfig::fromJson(v4, "config.json");
  EXPECT_EQ(a.slidingLayers, (std::vector<bool>{true, false, true, false, true, false, true}));
  EXPECT_EQ(a.rope.type, "linear");
  EXPECT_EQ(a.rope.factor, 8.0);
  ASSERT_TRUE(a.slidingRope.has_value());
  EXPECT_EQ(a.slidingRope->type, "default");  // rope_scaling is the global layers' only
  EXPECT_EQ(a.slidingRope->theta, 20000.0);

  auto v5 = minimalGemma3();
  v5["rope_parameters"] = {
      {"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 20000.0}}}};
  v5["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention",
                       "sliding_attention", "full_attention", "sliding_attention"};
  const ModelConfig b = ModelConfig::fromJson(v5, "config.json");
  EXPECT_EQ(b.slidingLayers, a.slidingLayers);
  EXPECT_EQ(b.rope, a.rope);
  EXPECT_EQ(*b.slidingRope, *a.slidingRope);
}

TEST(Gemma3Family, RefusesWhatItCannotRunNamingTheField) {
  auto doc = minimalGemma3();
  doc["use_bidirectional_attention"] = true;
  std::string e = refusal(doc);
  EXPECT_NE(e.find("use_bidirectional_attention"), std::string::npos) << e;
  EXPECT_NE(e.find("dir/config.json"), std::string::npos) << e;

  doc = minimalGemma3();
  doc["sliding_window"] = nullptr;  // sliding layers by the pattern, but no window
  e = refusal(doc);
  EXPECT_NE(e.find("sliding_window"), std::string::npos) << e;

  doc = minimalGemma3();
  doc["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                            {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", -1.0}}}};
  e = refusal(doc);
  EXPECT_NE(e.find("rope_parameters.sliding_attention.rope_theta"), std::string::npos) << e;

  doc = minimalGemma3();
  doc["rope_local_base_freq"] = 0.0;
  e = refusal(doc);
  EXPECT_NE(e.find("rope_local_base_freq"), std::string::npos) << e;
}

TEST(Gemma3Family, AllGlobalLayersNeedNoWindowAndNoLocalRope) {
  auto doc = minimalGemma3();
  doc["sliding_window"] = nullptr;
  doc["sliding_window_pattern"] = 1;  // (i + 1) % 1 == 0: every layer global
  const ModelConfig c = ModelConfig::fromJson(doc, "config.json");
  EXPECT_FALSE(c.slidingRope.has_value());
  for (int64_t i = 0; i < c.numLayers; ++i) EXPECT_FALSE(c.isSlidingLayer(i));
}

}  // namespace
