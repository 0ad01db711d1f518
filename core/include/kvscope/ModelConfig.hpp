// The model configuration read from a HuggingFace `config.json`, in either the
// transformers 4 style (`rope_theta`, `rope_scaling`, `torch_dtype` at the top level) or
// the transformers 5 style (`rope_parameters`, `dtype`). Each family's keys are read by its
// own file (core/src/model/families/), which also says which pieces of the shared kit its
// block is made of (BlockRecipe); the loader and the forward read the recipe, never the family.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kvscope {

enum class Architecture { Gpt2, Llama, Mistral, Qwen2, Qwen3, Olmo2, Granite, SmolLm3, Phi3, Gemma2, Gemma3, Qwen3Moe };

/// The family's `model_type` ("gpt2", "llama", "qwen3", "olmo2", ...).
std::string architectureName(Architecture a);
/// The `model_type` values KV Scope can load, for error messages (from the family list).
std::string supportedModelTypes();
/// The same, one entry per family.
std::vector<std::string> supportedModelTypeList();

struct RopeConfig {
  std::string type = "default";       // default | linear | dynamic | llama3
  double theta = 10000.0;             // rope_theta
  double factor = 1.0;                // rope_scaling.factor
  double lowFreqFactor = 1.0;         // llama3
  double highFreqFactor = 4.0;        // llama3
  int64_t originalMaxPositions = 0;   // original_max_position_embeddings (llama3, dynamic)
  double partialRotaryFactor = 1.0;   // fraction of head_dim that is rotated
  bool operator==(const RopeConfig& o) const;
};

/// The pieces of the shared kit a family's decoder block is composed of. Set by the family
/// file; the weight loader and the forward read these, never the family's name.
struct BlockRecipe {
  // LayerNorm: weight and bias; RMSNorm: weight; RmsNormPlusOne: Gemma's RMSNorm, the
  // weight stored as w and applied as (1 + w) (to every norm of the model, q/k norms too).
  enum class Norm { LayerNorm, RmsNorm, RmsNormPlusOne };
  enum class Positions { Learned, Rope };   // a position-embedding table, or rotary
  enum class Layout { Conv1d, Linear };     // weights stored [in, out] (GPT-2) or [out, in]
  enum class Mlp { Plain, Gated };          // down(act(up x)), or down(act(gate x) * up x)
  Norm norm = Norm::RmsNorm;
  Positions positions = Positions::Rope;
  Layout layout = Layout::Linear;
  bool fusedQkv = false;                    // one q|k|v projection (GPT-2 c_attn)
  Mlp mlp = Mlp::Gated;
  bool fusedGateUp = false;                 // one gate|up projection [2I, H] (Phi-3)
  bool divideScoresBySqrtD = false;         // scores / sqrt(d) (GPT-2) vs scores * (1/sqrt(d))
  bool qkNormOverHeads = false;             // q/k RMSNorm over the whole projection (OLMo 2),
                                            // not per head (Qwen3)
  bool embeddingScaleInWeightDtype = false; // the embedding multiplier rounded to the stored
                                            // embedding dtype first (Gemma's embed_scale)
  bool operator==(const BlockRecipe& o) const;
};

/// A sparse mixture-of-experts MLP (Qwen3-MoE, Mixtral): a router picks `topK` of
/// `numExperts` gated MLPs per token by softmax probability.
struct MoeConfig {
  int64_t numExperts = 0;        // 0: no MoE layer
  int64_t topK = 0;              // num_experts_per_tok
  int64_t intermediateSize = 0;  // each expert's (moe_intermediate_size)
  bool normTopK = false;         // norm_topk_prob: the chosen probabilities renormalised to 1
  std::vector<bool> layers;      // per layer: true where the MLP is the MoE block
};

struct ModelConfig {
  std::string sourceFile;             // path of the config.json this came from
  Architecture architecture = Architecture::Llama;
  std::string modelType;              // model_type as written
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int64_t numLayers = 0;
  int64_t numHeads = 0;
  int64_t numKvHeads = 0;             // == numHeads without GQA
  int64_t headDim = 0;                // head_dim override, else hiddenSize / numHeads
  int64_t intermediateSize = 0;       // GPT-2: n_inner or 4 * n_embd
  int64_t maxPositions = 0;           // n_positions / max_position_embeddings
  double normEps = 1e-5;              // layer_norm_epsilon / rms_norm_eps
  std::string activation;             // gelu_new | gelu | silu | ...
  BlockRecipe recipe;                 // which kit pieces the family's block uses
  RopeConfig rope;                    // unused with learned positions; the full-attention
                                      // layers' where the sliding ones have their own
  std::optional<RopeConfig> slidingRope;
  MoeConfig moe;                      // the MoE MLP where the family has one  // the sliding layers' RoPE where it differs (Gemma 3:
                                      // rope_local_base_freq / rope_parameters.sliding_attention)
  bool tieWordEmbeddings = false;
  bool qkvBias = false;               // Qwen2: true; Llama: attention_bias
  bool outputProjBias = false;        // Llama: attention_bias also covers o_proj
  bool mlpBias = false;
  bool qkNorm = false;                // RMSNorm of queries and keys before RoPE (Qwen3, OLMo 2)
  std::vector<bool> ropeLayers;       // per layer: false where it has no position encoding
                                      // (NoPE: no_rope_layers); empty: every layer rotates
  double embeddingMultiplier = 1.0;   // Granite: embeddings are scaled by it
  double attentionScale = 0.0;        // scores' scale (Granite's attention_multiplier); 0: 1/sqrt(d)
  double residualMultiplier = 1.0;    // Granite: each sublayer's output, before the residual add
  double logitsDivisor = 1.0;         // Granite: logits_scaling
  double attnLogitSoftcap = 0.0;      // Gemma 2: scores -> tanh(scores / cap) * cap before the
                                      // mask (attn_logit_softcapping); 0: none
  double finalLogitSoftcap = 0.0;     // Gemma 2: logits -> tanh(logits / cap) * cap
                                      // (final_logit_softcapping); 0: none
  bool scaleAttnByInverseLayerIdx = false;  // GPT-2 option
  int64_t slidingWindow = 0;          // 0: no sliding window anywhere
  std::vector<bool> slidingLayers;    // per layer: true where the window applies
  std::string dtype = "float32";      // the dtype the config names (dtype / torch_dtype)
  std::vector<int64_t> eosTokenIds;   // from config.json (and generation_config.json)
  std::optional<int64_t> bosTokenId;
  std::optional<int64_t> padTokenId;

  /// Parses a config document; `file` is used in error messages. Throws InputError naming
  /// the field for missing or ill-typed required fields and unsupported model types.
  static ModelConfig fromJson(const nlohmann::json& doc, const std::string& file);
  /// Reads and parses `path` (a config.json). Throws InputError.
  static ModelConfig load(const std::string& path);
  /// Adds EOS ids from a generation_config.json next to the config, when present.
  void mergeGenerationConfig(const std::string& path);

  bool usesRope() const { return recipe.positions == BlockRecipe::Positions::Rope; }
  bool isSlidingLayer(int64_t layer) const;
  /// Whether `layer` rotates its queries and keys (a RoPE model, not a NoPE layer).
  bool ropeOn(int64_t layer) const;
  /// Whether `layer`'s MLP is the mixture of experts (moe.layers).
  bool isMoeLayer(int64_t layer) const;
  /// The RoPE `layer` rotates with: slidingRope on a sliding layer where the config has one.
  const RopeConfig& ropeFor(int64_t layer) const;
};

}  // namespace kvscope
