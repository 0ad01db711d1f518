// What the HuggingFace Llama-style decoder families (llama, mistral, qwen2, qwen3, ...) share:
// the sizes and norms of their config, the per-layer sliding choice of `layer_types`, and
// their tensor names (model.layers.N.self_attn.q_proj ...).
#pragma once

#include "kvscope/ModelConfig.hpp"
#include "model/families/ModelFamily.hpp"

namespace kvscope {

class ConfigReader;

/// What a family's config class puts in place of an absent key (save_pretrained leaves out
/// what equals the class default). 0: the generic default (num_attention_heads for the KV
/// heads, hidden_size / num_attention_heads for head_dim).
struct DecoderDefaults {
  int64_t numKvHeads = 0;
  int64_t headDim = 0;
  double ropeTheta = 10000.0;
  int64_t originalMaxPositions = 0;  // the class's original_max_position_embeddings (Phi-3: 4096)
  double partialRotaryFactor = 1.0;  // the class's partial_rotary_factor (GLM-4: 0.5)
  int64_t intermediateSize = 0;      // > 0: intermediate_size when absent (a class without a dense MLP)
};

/// hidden_size, num_attention_heads, num_hidden_layers, intermediate_size,
/// max_position_embeddings, num_key_value_heads, head_dim (explicit or hidden/heads),
/// rms_norm_eps, hidden_act, RoPE (rope_parameters / rope_theta + rope_scaling), mlp_bias,
/// tie_word_embeddings, and the Llama-style recipe (RMSNorm, RoPE, Linear, gated MLP).
void readDecoderConfig(const ConfigReader& r, ModelConfig& c, const DecoderDefaults& defaults = {});

/// `layer_types` (transformers 5's per-layer list): where present it decides which layers
/// slide, with `sliding_window` as the window. Returns false when the key is absent.
bool readLayerTypes(const ConfigReader& r, ModelConfig& c, int64_t window);

/// `layer_types` as one flag per layer: true for an entry named in `marked`, false for one in
/// `others` (the first name of each is the one the error quotes); InputError naming
/// `layer_types` (not one entry per layer) or `layer_types[i]` (another entry: `family` has no
/// other layer type). Absent: empty.
std::vector<bool> layerTypeFlags(const ConfigReader& r, int64_t layers, const std::vector<std::string>& marked,
                                 const std::vector<std::string>& others, const std::string& family);

/// model.embed_tokens, model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj (+ .bias),
/// self_attn.{q,k}_norm, post_attention_layernorm, mlp.{gate,up,down}_proj (+ .bias)},
/// model.norm, lm_head.
WeightNames hfDecoderWeightNames();

/// hfDecoderWeightNames without pre-norms: each sublayer's output is normed instead
/// (post_attention_layernorm, post_feedforward_layernorm: OLMo 2, OLMo 3).
WeightNames postNormDecoderWeightNames();

/// The config.json keys every decoder family writes (sizes, eps, RoPE in the spec's style).
nlohmann::json hfDecoderDemoConfig(const CheckpointSpec& s);
/// The tensors of a decoder checkpoint in transformers' order: q/k/v (+ biases), o (+ bias),
/// q/k norms, gate/up/down, the two layer norms; model.norm; lm_head unless tied.
std::vector<CheckpointWriter::TensorPlan> hfDecoderDemoTensors(const CheckpointSpec& s, bool qkvBias,
                                                               bool oBias, bool qkNorm);
/// The same for a family with its own names: its norms where it names them (pre-, post-),
/// the q/k norms per head or over the whole projection.
std::vector<CheckpointWriter::TensorPlan> hfDecoderDemoTensors(const CheckpointSpec& s,
                                                               const WeightNames& n, bool qkvBias,
                                                               bool oBias, bool qkNorm,
                                                               bool qkNormOverHeads);
/// make-demo's expert width for the Qwen MoE families: half the dense MLP's, at least 2.
int64_t demoExpertWidth(const CheckpointSpec& s);
/// `dense`'s tensors with each MoE layer's dense gate/up/down (every layer but those in
/// `denseLayers`) replaced by the router [E, H] and each expert's gate/up [Im, H] and down
/// [H, Im], named by `n` (router, expertPrefix, expertGate/Up/Down).
std::vector<CheckpointWriter::TensorPlan> moeDemoTensors(const CheckpointSpec& s, const WeightNames& n,
                                                         std::vector<CheckpointWriter::TensorPlan> dense,
                                                         int64_t experts, int64_t expertWidth,
                                                         const std::vector<int64_t>& denseLayers);
/// The MoE keys of a Qwen3-MoE / Mixtral config: the expert count under `primary` or its
/// alias, num_experts_per_tok in [1, count]; InputError naming the field.
void readExpertCounts(const ConfigReader& r, MoeConfig& m, const char* primary, const char* alias,
                      int64_t defaultExperts, int64_t defaultTopK);
/// Qwen's sparse-MoE keys (Qwen3-MoE, Qwen3-Next): the expert count (num_experts, or 5.x's
/// num_local_experts), num_experts_per_tok, moe_intermediate_size, norm_topk_prob, and the layers
/// decoder_sparse_step picks outside mlp_only_layers; the class's defaults given.
void readQwenSparseMoe(const ConfigReader& r, ModelConfig& c, int64_t experts, int64_t topK, int64_t width,
                       bool normTopK);
/// Qwen's gated shared expert (Qwen3-Next, Qwen3.5-MoE): shared_expert_intermediate_size (the
/// class's default given), its output scaled by sigmoid(shared_expert_gate x).
void readQwenSharedExpert(const ConfigReader& r, ModelConfig& c, int64_t width);
/// The weight names of Qwen's sparse MoE with a gated shared expert: mlp.gate, the experts one
/// tensor each (mlp.experts.E.{gate,up,down}_proj, as save_pretrained writes them), the shared
/// expert and its gate.
void addQwenSharedExpertMoeNames(WeightNames& w);
/// `moe`'s tensors (moeDemoTensors) with a shared expert of the spec's intermediate width and its
/// gate [1, H] after each MoE layer's last expert (`experts` of them), named by `n`.
std::vector<CheckpointWriter::TensorPlan> withQwenSharedExperts(const CheckpointSpec& s, const WeightNames& n,
                                                                std::vector<CheckpointWriter::TensorPlan> moe,
                                                                int64_t experts);
/// `name` from the config: a positive finite number (a multiplier), else InputError.
double positiveNumber(const ConfigReader& r, const char* name, double fallback);
/// The rules every RoPE decoder's spec follows (an even head_dim).
void validateHfDecoderDemoSpec(const CheckpointSpec& s);

}  // namespace kvscope
