// What Gemma 2 and Gemma 3 share (transformers: models/gemma2, models/gemma3): the Llama block
// with Gemma's RMSNorm ((1 + w), in float32) in a sandwich (input_layernorm,
// post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm), the
// embeddings scaled by sqrt(hidden_size) rounded to the embedding dtype, GeGLU
// (hidden_activation), scores scaled by query_pre_attn_scalar^-0.5, optional attention and
// final-logit soft-caps, tied embeddings. Absent keys take the config classes' defaults.
#pragma once

#include "model/families/HfDecoderKit.hpp"

namespace kvscope {

/// The defaults where Gemma 2 and Gemma 3's config classes differ.
struct GemmaDefaults {
  double ropeTheta;           // Gemma2Config: 10000; Gemma3TextConfig (global): 1e6
  double attnLogitSoftcap;    // 50 / none (0)
  double finalLogitSoftcap;   // 30 / none (0)
};

/// The shared keys and recipe: readDecoderConfig (4 KV heads and head_dim 256 by default),
/// hidden_activation, attention_bias, tie_word_embeddings (default true), the (1 + w) norm,
/// the embedding scale, query_pre_attn_scalar, attn_logit_softcapping and
/// final_logit_softcapping (null: none).
void readGemmaConfig(const ConfigReader& r, ModelConfig& c, const GemmaDefaults& d);
/// Gemma2Config's and Gemma3TextConfig's sliding_window default.
constexpr int64_t kGemmaDefaultWindow = 4096;
/// sliding_window: 4096 when absent, 0 for null (no window); InputError below 0.
int64_t readGemmaWindow(const ConfigReader& r);
/// make-demo's window: --sliding-window, else the family's default (transformers' Gemma
/// models build a sliding mask whatever the layer types say, and refuse a config without one).
int64_t gemmaDemoWindow(const CheckpointSpec& s);
/// hfDecoderWeightNames with the sandwich norms and no MLP biases.
const WeightNames& gemmaWeightNames();
/// The config keys both write: sizes, RoPE, hidden_activation, head_dim,
/// query_pre_attn_scalar, sliding_window; the caller adds its soft-caps and layer types.
nlohmann::json gemmaDemoConfig(const CheckpointSpec& s, const char* architecture, const char* modelType);
/// The Llama-only and Qwen-only spec options switched off / refused.
void adjustGemmaDemoSpec(CheckpointSpec& s);
void validateGemmaDemoSpec(const CheckpointSpec& s);

}  // namespace kvscope
