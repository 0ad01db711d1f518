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

enum class Architecture { Gpt2, Llama, Mistral, Qwen2, Qwen3, Olmo2, Granite, SmolLm3, Phi3, Gemma2, Gemma3, Qwen3Moe, GptOss, Mixtral, Olmo3, Glm4, Ministral3, Llama4, Qwen3_5, Qwen3Next, Qwen3_5Moe, DeepseekV3, DeepseekV2 };

/// The family's `model_type` ("gpt2", "llama", "qwen3", "olmo2", ...).
std::string architectureName(Architecture a);
/// The `model_type` values KV Scope can load, for error messages (from the family list).
std::string supportedModelTypes();
/// The same, one entry per family.
std::vector<std::string> supportedModelTypeList();

struct RopeConfig {
  std::string type = "default";       // default | linear | dynamic | llama3 | yarn | longrope
  double theta = 10000.0;             // rope_theta
  double factor = 1.0;                // rope_scaling.factor; yarn, longrope: 0 when absent
                                      // (then max_position_embeddings / original, as
                                      // transformers derives it)
  double lowFreqFactor = 1.0;         // llama3
  double highFreqFactor = 4.0;        // llama3
  int64_t originalMaxPositions = 0;   // original_max_position_embeddings (llama3, dynamic,
                                      // yarn, longrope; yarn and longrope default to
                                      // max_position_embeddings)
  double partialRotaryFactor = 1.0;   // fraction of head_dim that is rotated
  // yarn, longrope: cos and sin are multiplied by the attention factor (attention_factor;
  // 0 when absent: derived from the factor, and for yarn from mscale / mscale_all_dim).
  double attentionFactor = 0.0;
  double betaFast = 32.0, betaSlow = 1.0;   // yarn: the ramp's rotation counts
  double mscale = 0.0, mscaleAllDim = 0.0;  // yarn (DeepSeek): 0 when absent
  bool truncate = true;                     // yarn: the correction range rounded outwards
  // longrope: per-frequency divisors (rotary_dim / 2 each), short up to and long beyond the
  // original context (chosen per forward by its largest position, as transformers does).
  std::vector<double> shortFactor, longFactor;
  // GGUF's rope_freqs (llama.cpp's form of Llama 3's scaling): each of the rotary_dim / 2
  // frequencies, as the type computes it, divided by its factor. Empty: none.
  std::vector<double> frequencyFactors;
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
  bool ropeInterleaved = false;             // RoPE pairs features (2i, 2i + 1) (GLM-4, GPT-J)
                                            // instead of (i, i + r/2)
  bool embeddingScaleInWeightDtype = false; // the embedding multiplier rounded to the stored
                                            // embedding dtype first (Gemma's embed_scale)
  bool operator==(const BlockRecipe& o) const;
};

/// A sparse mixture-of-experts MLP (Qwen3-MoE, Mixtral, GPT-OSS): a router picks `topK` of
/// `numExperts` gated MLPs per token.
struct MoeConfig {
  int64_t numExperts = 0;        // 0: no MoE layer
  int64_t topK = 0;              // num_experts_per_tok
  int64_t intermediateSize = 0;  // each expert's (moe_intermediate_size)
  bool normTopK = false;         // norm_topk_prob: the chosen probabilities renormalised to 1
  // SoftmaxThenTopK: softmax over every expert in float32, the k most probable (Qwen3-MoE,
  // Mixtral); TopKThenSoftmax: the k largest router logits, softmax over those k (GPT-OSS);
  // TopKThenSigmoid: the k largest router logits, each weighted by its own sigmoid (Llama 4).
  // SigmoidGroupLimited: DeepSeek V3's: sigmoid scores plus the router's score bias choose the k
  // experts, only within the topGroups of `groups` expert groups whose two best such scores sum
  // highest; weighted by the plain sigmoid scores (renormalised with normTopK) x routedScale.
  // SoftmaxGroupLimited: DeepSeek V2's group_limited_greedy: softmax scores choose the k experts
  // only within the topGroups groups whose best score is highest, weighted as SoftmaxThenTopK.
  // Every softmax routing's weights are x routedScale (1 but for DeepSeek).
  enum class Routing { SoftmaxThenTopK, TopKThenSoftmax, TopKThenSigmoid, SigmoidGroupLimited, SoftmaxGroupLimited };
  Routing routing = Routing::SoftmaxThenTopK;
  bool routerBias = false;       // the router has a bias (GPT-OSS)
  // Gated: down(act(gate x) * up x), one tensor per expert; ClampedGlu: GPT-OSS's experts,
  // stacked [E, in, out] with biases, gate and up interleaved in one product (even columns
  // gate, odd up), gate clamped above and up both sides at gluLimit, (up + 1) * gate *
  // sigmoid(gluAlpha * gate).
  // StackedGated: Llama 4's experts, stacked [E, H, 2Im] (gate the first Im columns, up the
  // rest) and [E, Im, H], no biases, down(act(gate x) * up x).
  enum class Expert { Gated, ClampedGlu, StackedGated };
  Expert expert = Expert::Gated;
  bool weightInputs = false;     // the router weight scales the expert's input (Llama 4), not
                                 // its output
  int64_t sharedIntermediateSize = 0;  // > 0: a shared gated MLP every token takes, added to
                                       // the experts' sum (Llama 4's shared_expert)
  bool sharedExpertGate = false;       // the shared expert's output times sigmoid(x . g)
                                       // (Qwen3-Next's shared_expert_gate)
  double gluAlpha = 1.702, gluLimit = 7.0;
  int64_t groups = 1, topGroups = 1;   // the group-limited routings: n_group, topk_group
  double routedScale = 1.0;            // routed_scaling_factor: the routed experts' weights x it
  std::vector<bool> layers;      // per layer: true where the MLP is the MoE block
};

/// Gated DeltaNet layers (Qwen3.5's `linear_attention` layers): in place of attention, a causal
/// depthwise convolution over q|k|v and the gated delta rule, whose state is one [Dk, Dv] matrix
/// per value head, not K/V rows. The layer keeps, per request, the convolution's last `convKernel`
/// inputs [C, convKernel] and the recurrent state [Hv, Dk, Dv] (transformers' conv_states and
/// recurrent_states).
struct DeltaNetConfig {
  int64_t keyHeads = 0, valueHeads = 0;      // linear_num_key_heads, linear_num_value_heads
  int64_t keyHeadDim = 0, valueHeadDim = 0;  // linear_key_head_dim, linear_value_head_dim
  int64_t convKernel = 4;                    // linear_conv_kernel_dim
  std::vector<bool> layers;                  // per layer: true where it is a Gated DeltaNet
  int64_t keyDim() const { return keyHeads * keyHeadDim; }
  int64_t valueDim() const { return valueHeads * valueHeadDim; }
  int64_t convDim() const { return 2 * keyDim() + valueDim(); }  // q | k | v channels
};

/// Multi-head latent attention (DeepSeek V2 / V3): a token's cache entry is one latent row c_kv
/// [kvLoraRank] (after kv_a_layernorm) and one roped key part k_pe [ropeDim] shared by every head,
/// as transformers caches them; each head's key (nope | rope) and value are decompressed from the
/// cached latent by kv_b_proj at every forward. The model's cache geometry is then one KV "head"
/// of headDim = kvLoraRank (keys: c_kv) and valueHeadDim = ropeDim (values: k_pe).
struct MlaConfig {
  int64_t qLoraRank = 0;   // q_lora_rank; 0 (null): the query is q_proj's
  int64_t kvLoraRank = 0;  // kv_lora_rank; 0: no latent attention
  int64_t nopeDim = 0;     // qk_nope_head_dim: the key/query features without position
  int64_t ropeDim = 0;     // qk_rope_head_dim: the roped ones
  int64_t valueDim = 0;    // v_head_dim
  // How the roped part's features pair up. HalfSplit: feature i with i + rope/2 (V3 with
  // rope_interleave false); InPlacePairs: (2i, 2i + 1) turned in place (V2's complex product);
  // Deinterleaved: (2i, 2i + 1) turned and written all evens, then all odds (V3's rope_interleave).
  enum class RopePairs { HalfSplit, InPlacePairs, Deinterleaved };
  RopePairs ropePairs = RopePairs::HalfSplit;
  // yarn's mscale(factor, mscale_all_dim)^2 in the softmax scale (qk_head_dim^-0.5 times it, as
  // ModelConfig::attentionScale holds); 1: none (no yarn, or mscale_all_dim 0).
  double scoreMscale = 1.0;
  bool enabled() const { return kvLoraRank > 0; }
  int64_t queryDim() const { return nopeDim + ropeDim; }
};

struct ModelConfig {
  std::string sourceFile;             // path of the config.json this came from
  Architecture architecture = Architecture::Llama;
  std::string modelType;              // model_type as written (the text model's)
  std::string wrapperModelType;       // a multimodal checkpoint's own model_type (gemma3) whose
                                      // text_config this is; empty otherwise
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int64_t numLayers = 0;
  int64_t numHeads = 0;
  int64_t numKvHeads = 0;             // == numHeads without GQA
  int64_t headDim = 0;                // head_dim override, else hiddenSize / numHeads
  int64_t valueHeadDim = 0;           // a cached value's width where it differs from headDim's
                                      // (MLA: k_pe's); 0: headDim
  int64_t intermediateSize = 0;       // GPT-2: n_inner or 4 * n_embd
  int64_t maxPositions = 0;           // n_positions / max_position_embeddings
  double normEps = 1e-5;              // layer_norm_epsilon / rms_norm_eps
  std::string activation;             // gelu_new | gelu | silu | ...
  BlockRecipe recipe;                 // which kit pieces the family's block uses
  RopeConfig rope;                    // unused with learned positions; the full-attention
                                      // layers' where the sliding ones have their own
  std::optional<RopeConfig> slidingRope;  // the sliding layers' RoPE where it differs (Gemma 3:
                                          // rope_local_base_freq / rope_parameters.sliding_attention)
  MoeConfig moe;                      // the MoE MLP where the family has one
  bool tieWordEmbeddings = false;
  bool qkvBias = false;               // Qwen2: true; Llama: attention_bias
  bool outputProjBias = false;        // Llama: attention_bias also covers o_proj
  bool mlpBias = false;
  bool qkNorm = false;                // RMSNorm of queries and keys before RoPE (Qwen3, OLMo 2)
  bool attentionSinks = false;        // a learned sink logit per head in each softmax (GPT-OSS)
  std::vector<bool> ropeLayers;       // per layer: false where it has no position encoding
                                      // (NoPE: no_rope_layers); empty: every layer rotates
  std::vector<bool> intervalRopeLayers;  // the same from no_rope_layer_interval alone (every
                                         // interval-th layer NoPE): what a path that ignores
                                         // no_rope_layers runs; empty: the family has no such rule
  double queryScaleBeta = 0.0;        // Ministral 3: rotated queries x (1 + beta ln(1 + floor(p /
  int64_t queryScaleContext = 0;      // queryScaleContext))) (llama_4_scaling_beta); 0: none
  int64_t queryScaleOffset = 0;       // Llama 4: floor((p + 1) / floor_scale), so 1
  bool queryScaleNopeOnly = false;    // Llama 4: only the NoPE layers' queries are scaled
                                      // (attn_temperature_tuning)
  bool qkL2Norm = false;              // Llama 4's use_qk_norm: q and k divided by their RMS over
                                      // each head (no weight) after RoPE, on the RoPE layers
  int64_t attentionChunk = 0;         // Llama 4: a chunked layer's query sees only the keys of
  std::vector<bool> chunkedLayers;    // its own chunk of attentionChunk positions
                                      // (attention_chunk_size); per layer: true where it applies
  MlaConfig mla;                      // DeepSeek's latent attention (none: mla.kvLoraRank 0)
  DeltaNetConfig deltaNet;            // Qwen3.5's recurrent layers (none: deltaNet.layers empty)
  bool attentionOutputGate = false;   // Qwen3.5: q_proj yields each head's query and as many
                                      // gate features; the attention output is multiplied by
                                      // sigmoid(gate) before o_proj
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
  /// A multimodal config whose language model is its text_config (Gemma 3, Mistral 3).
  static ModelConfig fromTextConfig(const nlohmann::json& doc, const std::string& file);
  /// Reads and parses `path` (a config.json). Throws InputError.
  static ModelConfig load(const std::string& path);
  /// Adds EOS ids from a generation_config.json next to the config, when present.
  void mergeGenerationConfig(const std::string& path);

  /// The width of a cached value row: valueHeadDim, else headDim.
  int64_t cacheValueDim() const { return valueHeadDim > 0 ? valueHeadDim : headDim; }
  /// The head width RoPE rotates over (times partialRotaryFactor): MLA's roped part, else headDim.
  int64_t rotaryHeadDim() const { return mla.enabled() ? mla.ropeDim : headDim; }
  /// Whether a key record is one head's key, turned by RoPE over its first rotary features
  /// (what the rows that re-derive key records under another rotation assume): not MLA's latent
  /// rows, whose roped part is a record of its own (the values).
  bool keyRecordsAreRotatedHeads() const { return !mla.enabled(); }
  bool usesRope() const { return recipe.positions == BlockRecipe::Positions::Rope; }
  bool isSlidingLayer(int64_t layer) const;
  /// Whether `layer` attends within chunks of attentionChunk positions (Llama 4).
  bool isChunkedLayer(int64_t layer) const;
  /// Whether `layer` rotates its queries and keys (a RoPE model, not a NoPE layer).
  bool ropeOn(int64_t layer) const;
  /// Whether `layer` is a recurrent (Gated DeltaNet) layer: a state, no K/V rows.
  bool isRecurrentLayer(int64_t layer) const;
  /// Whether any layer is (the model's cache is not K/V rows alone).
  bool hasRecurrentLayers() const;
  /// Whether `layer`'s MLP is the mixture of experts (moe.layers).
  bool isMoeLayer(int64_t layer) const;
  /// The RoPE `layer` rotates with: slidingRope on a sliding layer where the config has one.
  const RopeConfig& ropeFor(int64_t layer) const;
  /// What kind of layer `layer` is, in a few words for the inspector: its attention (full,
  /// sliding window W), its positions (NoPE, the RoPE type and theta where the layer types
  /// differ, partial rotary, interleaved pairs), sinks, soft-cap, a mixture of experts.
  std::string layerDescription(int64_t layer) const;
};

}  // namespace kvscope
