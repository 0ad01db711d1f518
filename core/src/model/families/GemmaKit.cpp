#include "model/families/GemmaKit.hpp"

#include <cmath>

#include "kvscope/Error.hpp"
#include "model/ConfigReader.hpp"

namespace kvscope {

namespace {

// A soft-cap: a positive number, or null / absent-with-default 0 (none).
double softcap(const ConfigReader& r, const char* key, double fallback) {
  if (r.doc().contains(key) && r.doc()[key].is_null()) return 0.0;
  if (!r.has(key) && fallback == 0.0) return 0.0;
  return positiveNumber(r, key, fallback);
}

}  // namespace

void readGemmaConfig(const ConfigReader& r, ModelConfig& c, const GemmaDefaults& d) {
  readDecoderConfig(r, c, DecoderDefaults{4, 256, d.ropeTheta});
  c.activation = r.activation("hidden_activation", "gelu_pytorch_tanh");
  c.qkvBias = c.outputProjBias = r.boolOr("attention_bias", false);
  c.tieWordEmbeddings = r.boolOr("tie_word_embeddings", true);
  c.recipe.norm = BlockRecipe::Norm::RmsNormPlusOne;
  c.recipe.embeddingScaleInWeightDtype = true;
  c.embeddingMultiplier = std::sqrt(static_cast<double>(c.hiddenSize));
  c.attentionScale = 1.0 / std::sqrt(positiveNumber(r, "query_pre_attn_scalar", 256.0));
  c.attnLogitSoftcap = softcap(r, "attn_logit_softcapping", d.attnLogitSoftcap);
  c.finalLogitSoftcap = softcap(r, "final_logit_softcapping", d.finalLogitSoftcap);
}

int64_t readGemmaWindow(const ConfigReader& r) {
  if (r.doc().contains("sliding_window") && r.doc()["sliding_window"].is_null()) return 0;
  const int64_t window = r.intOr("sliding_window", kGemmaDefaultWindow);
  if (window < 0) throw InputError(r.file(), "sliding_window", "must be >= 0");
  return window;
}

const WeightNames& gemmaWeightNames() {
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

int64_t gemmaDemoWindow(const CheckpointSpec& s) {
  return s.slidingWindow > 0 ? s.slidingWindow : kGemmaDefaultWindow;
}

nlohmann::json gemmaDemoConfig(const CheckpointSpec& s, const char* architecture, const char* modelType) {
  nlohmann::json c = hfDecoderDemoConfig(s);
  c["architectures"] = nlohmann::json::array({architecture});
  c["model_type"] = modelType;
  c.erase("hidden_act");
  c["hidden_activation"] = "gelu_pytorch_tanh";
  c["attention_bias"] = false;
  c["head_dim"] = s.resolvedHeadDim();
  c["query_pre_attn_scalar"] = s.resolvedHeadDim();
  c["sliding_window"] = gemmaDemoWindow(s);
  return c;
}

void adjustGemmaDemoSpec(CheckpointSpec& s) {
  s.attentionBias = false;
  s.useSlidingWindow = false;
  s.maxWindowLayers = 0;
}

void validateGemmaDemoSpec(const CheckpointSpec& s) {
  validateHfDecoderDemoSpec(s);
  auto require = [](bool ok, const std::string& field, const std::string& what) {
    if (!ok) throw UsageError("checkpoint spec: " + field + ": " + what);
  };
  require(!s.attentionBias, "attention_bias", "only Llama has the attention_bias option");
  require(!s.useSlidingWindow, "use_sliding_window", "only Qwen2 and Qwen3 have this switch");
  require(s.maxWindowLayers == 0, "max_window_layers", "only Qwen2 and Qwen3 have this option");
}

}  // namespace kvscope
