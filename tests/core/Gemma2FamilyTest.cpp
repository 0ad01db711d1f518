// Gemma 2's config keys as transformers reads them (Gemma2Config's defaults where
// save_pretrained left a key out, null soft-caps, the alternating layers when layer_types is
// absent) and its embedding scale rounded to the weights' dtype. The numerics against real
// transformers are FamilyGoldenTest's (tests/fixtures/families/models/gemma2).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "ScratchCheckpoint.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/ModelConfig.hpp"
#include "model/ModelImpl.hpp"

using namespace kvscope;

namespace {

nlohmann::json minimalGemma2() {
  return {{"model_type", "gemma2"}, {"vocab_size", 100}, {"hidden_size", 64},
          {"num_attention_heads", 4}, {"num_hidden_layers", 4}, {"intermediate_size", 128},
          {"max_position_embeddings", 8192}};
}

TEST(Gemma2Family, AbsentKeysTakeGemma2ConfigsDefaults) {
  const ModelConfig c = ModelConfig::fromJson(minimalGemma2(), "config.json");
  EXPECT_EQ(c.headDim, 256);  // not hidden / heads (16)
  EXPECT_EQ(c.numKvHeads, 4);
  EXPECT_DOUBLE_EQ(c.attentionScale, 1.0 / 16.0);  // query_pre_attn_scalar 256
  EXPECT_EQ(c.attnLogitSoftcap, 50.0);
  EXPECT_EQ(c.finalLogitSoftcap, 30.0);
  EXPECT_TRUE(c.tieWordEmbeddings);
  EXPECT_EQ(c.activation, "gelu_pytorch_tanh");
  EXPECT_EQ(c.recipe.norm, BlockRecipe::Norm::RmsNormPlusOne);
  EXPECT_DOUBLE_EQ(c.embeddingMultiplier, 8.0);
  EXPECT_EQ(c.slidingWindow, 4096);
  EXPECT_EQ(c.slidingLayers, (std::vector<bool>{true, false, true, false}));  // layers 0, 2 slide
}

TEST(Gemma2Family, LayerTypesNullCapsAndNullWindow) {
  auto doc = minimalGemma2();
  doc["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention", "full_attention"};
  doc["sliding_window"] = 6;
  doc["attn_logit_softcapping"] = nullptr;
  doc["final_logit_softcapping"] = nullptr;
  doc["head_dim"] = 16;
  ModelConfig c = ModelConfig::fromJson(doc, "config.json");
  EXPECT_EQ(c.slidingLayers, (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ(c.slidingWindow, 6);
  EXPECT_EQ(c.attnLogitSoftcap, 0.0);
  EXPECT_EQ(c.finalLogitSoftcap, 0.0);
  doc["sliding_window"] = nullptr;
  c = ModelConfig::fromJson(doc, "config.json");
  EXPECT_EQ(c.slidingWindow, 0);
  EXPECT_FALSE(c.isSlidingLayer(1));
}

TEST(Gemma2Family, ABadSoftcapNamesTheKey) {
  auto doc = minimalGemma2();
  doc["attn_logit_softcapping"] = -1.0;
  try {
    ModelConfig::fromJson(doc, "dir/config.json");
    FAIL() << "a negative soft-cap was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("attn_logit_softcapping"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("dir/config.json"), std::string::npos) << e.what();
  }
}

TEST(Gemma2Family, TheEmbeddingScaleIsRoundedToTheWeightsDtype) {
  // transformers: embed_scale = torch.tensor(hidden_size ** 0.5).to(weight dtype); sqrt(32)
  // = 5.65685 is 5.65625 in bfloat16.
  for (const auto dtype : {SafetensorsDtype::F32, SafetensorsDtype::BF16}) {
    CheckpointSpec spec = test::smallSpec(Architecture::Gemma2);
    spec.storedDtype = dtype;
    auto model = Model::load(test::writeScratchCheckpoint(
        "gemma2-scale", dtype == SafetensorsDtype::BF16 ? "bf16" : "f32", spec));
    const double want = dtype == SafetensorsDtype::BF16 ? 5.65625 : static_cast<double>(std::sqrt(32.0f));
    EXPECT_DOUBLE_EQ(model->impl().embedScale, want);
  }
}

}  // namespace
