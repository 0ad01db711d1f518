// The model configuration read from a HuggingFace `config.json`, in either the
// transformers 4 style (`rope_theta`, `rope_scaling`, `torch_dtype` at the top level) or
// the transformers 5 style (`rope_parameters`, `dtype`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kvscope {

enum class Architecture { Gpt2, Llama, Mistral, Qwen2, Qwen3 };

/// "gpt2", "llama", "mistral", "qwen2", "qwen3".
std::string architectureName(Architecture a);
/// The `model_type` values KV Scope can load, for error messages.
std::string supportedModelTypes();

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
  RopeConfig rope;                    // unused for GPT-2
  bool tieWordEmbeddings = false;
  bool qkvBias = false;               // Qwen2: true; Llama: attention_bias
  bool outputProjBias = false;        // Llama: attention_bias also covers o_proj
  bool mlpBias = false;
  bool qkNorm = false;                // per-head RMSNorm of queries and keys before RoPE (Qwen3)
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

  bool usesRope() const { return architecture != Architecture::Gpt2; }
  bool isSlidingLayer(int64_t layer) const;
};

}  // namespace kvscope
