// Gemma 2 (`gemma2`): the Llama block with Gemma's RMSNorm ((1 + w), in float32) in a
// sandwich: input_layernorm before attention, post_attention_layernorm on its output,
// pre_feedforward_layernorm before the MLP, post_feedforward_layernorm on its output; the
// embeddings scaled by sqrt(hidden_size) rounded to the embedding dtype; GeGLU
// (hidden_activation, gelu_pytorch_tanh); scores scaled by query_pre_attn_scalar^-0.5 and
// soft-capped (tanh(s / cap) * cap, attn_logit_softcapping) before the mask; the logits
// soft-capped too (final_logit_softcapping); sliding and full layers alternating (layer_types,
// else every even layer slides); tied embeddings. transformers: models/gemma2/modeling_gemma2.py.
//
// A key absent from config.json takes Gemma2Config's default (save_pretrained leaves out
// what equals the base config's default, tie_word_embeddings among them).
#include <cmath>

#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/HfDecoderKit.hpp"

namespace kvscope {

namespace {

// A soft-cap: a positive number, or null / absent-with-default.
double softcap(const ConfigReader& r, const char* key, double fallback) {
  if (r.doc().contains(key) && r.doc()[key].is_null()) return 0.0;  // null: no soft-cap
  return positiveNumber(r, key, fallback);
}

class Gemma2Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Gemma2; }
  std::string modelType() const override { return "gemma2"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readDecoderConfig(r, c);
    if (!r.has("num_key_value_heads")) c.numKvHeads = 4;  // Gemma2Config's default
    if (!r.has("head_dim")) c.headDim = 256;
    if (c.numHeads % c.numKvHeads != 0)
      throw InputError(r.file(), "num_key_value_heads",
                       std::to_string(c.numKvHeads) + " does not divide num_attention_heads " +
                           std::to_string(c.numHeads));
    c.activation = r.activation("hidden_activation", "gelu_pytorch_tanh");
    c.qkvBias = c.outputProjBias = r.boolOr("attention_bias", false);
    c.tieWordEmbeddings = r.boolOr("tie_word_embeddings", true);
    c.recipe.norm = BlockRecipe::Norm::RmsNormPlusOne;
    c.recipe.embeddingScaleInWeightDtype = true;
    c.embeddingMultiplier = std::sqrt(static_cast<double>(c.hiddenSize));
    c.attentionScale = 1.0 / std::sqrt(positiveNumber(r, "query_pre_attn_scalar", 256.0));
    c.attnLogitSoftcap = softcap(r, "attn_logit_softcapping", 50.0);
    c.finalLogitSoftcap = softcap(r, "final_logit_softcapping", 30.0);
    const bool nullWindow = r.doc().contains("sliding_window") && r.doc()["sliding_window"].is_null();
    const int64_t window = nullWindow ? 0 : r.intOr("sliding_window", 4096);
    if (window < 0) throw InputError(r.file(), "sliding_window", "must be >= 0");
    if (window == 0) return;
    if (!readLayerTypes(r, c, window)) {  // transformers' default: layers 0, 2, 4, ... slide
      c.slidingWindow = window;
      for (int64_t i = 0; i < c.numLayers; ++i) c.slidingLayers[static_cast<size_t>(i)] = i % 2 == 0;
    }
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = [] {
      WeightNames w = hfDecoderWeightNames();
      w.postAttnNorm = "post_attention_layernorm.weight";
      w.mlpNorm = "pre_feedforward_layernorm.weight";
      w.postMlpNorm = "post_feedforward_layernorm.weight";
      w.gateBias = w.upBias = w.downBias = "";
      return w;
    }();
    return n;
  }

  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"Gemma2ForCausalLM"});
    c["model_type"] = "gemma2";
    c.erase("hidden_act");
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c["attention_bias"] = false;
    c["head_dim"] = s.resolvedHeadDim();
    c["query_pre_attn_scalar"] = s.resolvedHeadDim();
    c["attn_logit_softcapping"] = 50.0;
    c["final_logit_softcapping"] = 30.0;
    c["sliding_window"] = s.slidingWindow > 0 ? nlohmann::json(s.slidingWindow) : nlohmann::json(nullptr);
    // With a window, layers 0, 2, ... slide (Gemma 2's pattern); without one, none does
    // (transformers cannot build a sliding layer's cache without a window).
    nlohmann::json types = nlohmann::json::array();
    for (int64_t i = 0; i < s.numLayers; ++i)
      types.push_back(s.slidingWindow > 0 && i % 2 == 0 ? "sliding_attention" : "full_attention");
    c["layer_types"] = types;
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    return hfDecoderDemoTensors(s, weightNames(), false, false, false, false);
  }

  void adjustDemoSpec(CheckpointSpec& s) const override {
    s.attentionBias = false;
    s.useSlidingWindow = false;
    s.maxWindowLayers = 0;
  }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    validateHfDecoderDemoSpec(s);
    require(!s.attentionBias, "attention_bias", "only Llama has the attention_bias option");
    require(!s.useSlidingWindow, "use_sliding_window", "only Qwen2 and Qwen3 have this switch");
    require(s.maxWindowLayers == 0, "max_window_layers", "only Qwen2 and Qwen3 have this option");
  }
};

}  // namespace

const ModelFamily& gemma2Family() {
  static const Gemma2Family f;
  return f;
}

}  // namespace kvscope
