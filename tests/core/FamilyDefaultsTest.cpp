// The config keys of Mixtral, OLMo 3, GLM-4, Ministral 3 and a multimodal Gemma 3 as
// transformers 5.17 reads them: each config class's defaults for absent keys, the per-layer
// choices (windows, RoPE per layer type), the multimodal wrapper's text_config, and what each
// refuses, naming the file and the field. The numerics against real transformers are
// FamilyGoldenTest's (tests/fixtures/families/models/*).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "TestSupport.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/ModelConfig.hpp"

using namespace kvscope;
using nlohmann::json;

namespace {

json sizes(const char* type) {
  return {{"model_type", type}, {"vocab_size", 100}, {"hidden_size", 64}, {"num_attention_heads", 8},
          {"num_hidden_layers", 8}, {"intermediate_size", 32}, {"max_position_embeddings", 512}};
}

std::string familyRefusal(const json& doc) {
  try {
    ModelConfig::fromJson(doc, "dir/config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(FamilyDefaults, MixtralRoutesAmongEightExpertsAndAlwaysRenormalises) {
  const ModelConfig c = ModelConfig::fromJson(sizes("mixtral"), "config.json");
  EXPECT_EQ(c.architecture, Architecture::Mixtral);
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.numKvHeads, 8);
  EXPECT_DOUBLE_EQ(c.normEps, 1e-5);
  EXPECT_EQ(c.moe.numExperts, 8);
  EXPECT_EQ(c.moe.topK, 2);
  EXPECT_TRUE(c.moe.normTopK);
  EXPECT_EQ(c.moe.intermediateSize, 32);
  EXPECT_EQ(c.slidingWindow, 0);
  for (int64_t i = 0; i < 8; ++i) EXPECT_TRUE(c.isMoeLayer(i));
  json doc = sizes("mixtral");
  doc["num_experts"] = 4;  // the attribute_map alias
  doc["sliding_window"] = 16;
  const ModelConfig w = ModelConfig::fromJson(doc, "config.json");
  EXPECT_EQ(w.moe.numExperts, 4);
  EXPECT_TRUE(w.isSlidingLayer(0) && w.isSlidingLayer(7));
  doc["num_experts_per_tok"] = 5;
  EXPECT_NE(familyRefusal(doc).find("num_experts_per_tok"), std::string::npos);
}

TEST(FamilyDefaults, Olmo3SlidesThreeLayersInFourAndKeepsALocalRope) {
  json doc = sizes("olmo3");
  doc["rope_theta"] = 10000.0;  // transformers 4 keys reach the full-attention layers only
  doc["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 8.0}, {"original_max_position_embeddings", 64}};
  const ModelConfig c = ModelConfig::fromJson(doc, "config.json");
  EXPECT_EQ(c.architecture, Architecture::Olmo3);
  EXPECT_EQ(c.slidingWindow, 4096);
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(c.isSlidingLayer(i), (i + 1) % 4 != 0) << i;
  EXPECT_EQ(c.ropeFor(3).type, "yarn");
  EXPECT_EQ(c.ropeFor(3).theta, 10000.0);
  EXPECT_EQ(c.ropeFor(0).type, "default");
  EXPECT_EQ(c.ropeFor(0).theta, 500000.0);
  EXPECT_TRUE(c.qkNorm);
  EXPECT_TRUE(c.recipe.qkNormOverHeads);
  EXPECT_DOUBLE_EQ(c.normEps, 1e-5);
}

TEST(FamilyDefaults, Glm4RotatesHalfOfA128WideHeadInAdjacentPairs) {
  const ModelConfig c = ModelConfig::fromJson(sizes("glm4"), "config.json");
  EXPECT_EQ(c.architecture, Architecture::Glm4);
  EXPECT_EQ(c.headDim, 128);  // Glm4Config's default, not hidden / heads
  EXPECT_EQ(c.numKvHeads, 2);
  EXPECT_EQ(c.rope.partialRotaryFactor, 0.5);
  EXPECT_TRUE(c.recipe.ropeInterleaved);
  EXPECT_TRUE(c.recipe.fusedGateUp);
  EXPECT_TRUE(c.qkvBias);
  EXPECT_FALSE(c.outputProjBias);
  EXPECT_DOUBLE_EQ(c.normEps, 1.5625e-07);
  json doc = sizes("glm4");
  doc["partial_rotary_factor"] = 1.0;
  EXPECT_EQ(ModelConfig::fromJson(doc, "config.json").rope.partialRotaryFactor, 1.0);
}

TEST(FamilyDefaults, Ministral3ScalesQueriesByItsRopeEntry) {
  const ModelConfig c = ModelConfig::fromJson(sizes("ministral3"), "config.json");
  EXPECT_EQ(c.architecture, Architecture::Ministral3);
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.rope.factor, 16.0);
  EXPECT_EQ(c.rope.originalMaxPositions, 16384);
  EXPECT_EQ(c.queryScaleBeta, 0.1);
  EXPECT_EQ(c.queryScaleContext, 16384);
  json doc = sizes("ministral3");
  doc["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 16.0},
                            {"original_max_position_embeddings", 4096}};
  const std::string e = familyRefusal(doc);
  EXPECT_NE(e.find("rope_parameters.llama_4_scaling_beta"), std::string::npos) << e;
  EXPECT_NE(e.find("dir/config.json"), std::string::npos) << e;
}

TEST(FamilyDefaults, AMultimodalGemma3IsItsTextConfig) {
  json doc = {{"model_type", "gemma3"}, {"tie_word_embeddings", true}, {"dtype", "bfloat16"},
              {"text_config", sizes("gemma3_text")}, {"vision_config", {{"model_type", "siglip_vision_model"}}}};
  doc["text_config"]["head_dim"] = 8;
  const ModelConfig c = ModelConfig::fromJson(doc, "dir/config.json");
  EXPECT_EQ(c.architecture, Architecture::Gemma3);
  EXPECT_EQ(c.wrapperModelType, "gemma3");
  EXPECT_EQ(c.modelType, "gemma3_text");
  EXPECT_EQ(c.dtype, "bfloat16");  // the wrapper's, text_config names none
  EXPECT_TRUE(c.tieWordEmbeddings);
  EXPECT_EQ(c.sourceFile, "dir/config.json");
  doc["text_config"].erase("model_type");
  EXPECT_NE(familyRefusal(doc).find("text_config.model_type"), std::string::npos);
  doc["text_config"]["model_type"] = "gemma3_text";
  doc["text_config"].erase("hidden_size");
  const std::string e = familyRefusal(doc);
  EXPECT_NE(e.find("text_config"), std::string::npos) << e;
  EXPECT_NE(e.find("hidden_size"), std::string::npos) << e;
}

TEST(FamilyDefaults, AMultimodalCheckpointLoadsItsLanguageModelOnly) {
  // transformers 5.17's save_pretrained of Gemma3ForConditionalGeneration: the text weights
  // under language_model.model.*, a SigLIP tower beside them.
  auto model = Model::load(test::fixture("families/models/gemma3"));
  EXPECT_EQ(model->config().numLayers, 3);
  EXPECT_EQ(model->config().wrapperModelType, "gemma3");
}

}  // namespace
