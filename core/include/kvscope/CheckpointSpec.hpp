// What CheckpointWriter should produce: the shape of a random-weight model, how it is
// stored (dtype, shards) and which transformers config style describes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvscope/ModelConfig.hpp"
#include "kvscope/SafetensorsFile.hpp"

namespace kvscope {

enum class ConfigStyle {
  V4,  // transformers 4: rope_theta + rope_scaling, torch_dtype
  V5   // transformers 5: rope_parameters, dtype, layer_types
};

struct CheckpointSpec {
  Architecture architecture = Architecture::Llama;
  int64_t vocabSize = 512;  // tokenizer and embedding rows; the last id is <|endoftext|>
  int64_t hiddenSize = 64;
  int64_t numLayers = 3;
  int64_t numHeads = 4;
  int64_t numKvHeads = 2;          // must equal numHeads for GPT-2
  int64_t headDim = 0;             // 0: hiddenSize / numHeads (not allowed for GPT-2)
  int64_t intermediateSize = 128;  // GPT-2: n_inner (written as null when 4 * hidden)
  int64_t maxPositions = 256;      // n_positions / max_position_embeddings

  // Sliding window: Mistral applies it to every layer; Qwen2 only with useSlidingWindow,
  // to layers i >= maxWindowLayers. 0 = no window.
  int64_t slidingWindow = 0;
  bool useSlidingWindow = false;  // Qwen2 only
  int64_t maxWindowLayers = 0;    // Qwen2 only

  // RoPE (ignored for GPT-2, which must keep the defaults).
  std::string ropeType = "default";  // default | linear | dynamic | llama3
  double ropeTheta = 10000.0;
  double ropeFactor = 1.0;               // linear, dynamic, llama3
  double ropeLowFreqFactor = 1.0;        // llama3
  double ropeHighFreqFactor = 4.0;       // llama3
  int64_t ropeOriginalMaxPositions = 0;  // llama3 (required), dynamic (optional)

  // Qwen3.5's Gated DeltaNet layers: key and value heads and their width; 0: derived (the KV
  // heads, the heads, head_dim). fullAttentionInterval: every N-th layer full attention, the
  // others DeltaNets (0: alternating, from a DeltaNet).
  int64_t linearKeyHeads = 0, linearValueHeads = 0, linearHeadDim = 0;
  int64_t fullAttentionInterval = 0;

  bool tieWordEmbeddings = false;  // GPT-2 is always tied
  bool attentionBias = false;      // Llama only (q/k/v/o biases); Qwen2 always has q/k/v bias

  SafetensorsDtype storedDtype = SafetensorsDtype::F32;  // F32 | F16 | BF16
  ConfigStyle configStyle = ConfigStyle::V5;
  int64_t numShards = 1;  // 1: model.safetensors; N: model-0000i-of-0000N + index
  // > 0: ignore numShards and cut shards like save_pretrained's max_shard_size (a shard
  // is closed when the next tensor would take it past this many bytes).
  uint64_t maxShardBytes = 0;
  double normEps = 0.0;  // rms_norm_eps / layer_norm_epsilon; 0: the architecture's default

  double initStd = 0.25;  // std of the normal init of matrices and embeddings
  uint64_t seed = 0;
  int64_t bosTokenId = -1;  // -1: the <|endoftext|> id (vocabSize - 1)
  int64_t eosTokenId = -1;  // -1: the <|endoftext|> id (vocabSize - 1)

  /// A tiny Llama-family model with grouped-query attention: 3 layers, hidden 64,
  /// 4 query / 2 KV heads, vocab 512, 256 positions, F32.
  static CheckpointSpec demo();
  /// GPT-2-small shape (12 layers, 768 wide, 12 heads, 1024 positions) with a
  /// bench-friendly vocabulary of 8192 and init std 0.02.
  static CheckpointSpec gpt2Small();
  /// Real model shapes in bf16, sharded at 5 GB like save_pretrained (random weights):
  /// Llama-3.2-1B (2.5 GB, one file), Llama-3.1-8B (16 GB, 4 shards), Qwen2.5-7B (15 GB).
  static CheckpointSpec llama32_1b();
  static CheckpointSpec llama31_8b();
  static CheckpointSpec qwen25_7b();
  static CheckpointSpec qwen3_8b();
  static CheckpointSpec qwen3_14b();  // 29.5 GB: larger than a 24 GB machine
  /// Qwen3.5-9B's text model: 32 layers, every fourth full attention, the others Gated DeltaNets
  /// (16 key / 32 value heads of 128), head_dim 256, vocab 248320 (18 GB bf16).
  static CheckpointSpec qwen3_5_9b();
  /// Names preset() accepts, in the order help texts list them.
  static std::vector<std::string> presetNames();
  /// A preset by name (see presetNames()); throws UsageError listing the names.
  static CheckpointSpec preset(const std::string& name);

  /// Switches the architecture, adjusting fields that the new one fixes (GPT-2: kv heads
  /// = heads, tied, no head_dim override, no window, default RoPE).
  void setArchitecture(Architecture a);
  /// A sliding window as the family reads one (Qwen2/Qwen3 also switch use_sliding_window).
  void setSlidingWindow(int64_t window);

  int64_t specialTokenId() const { return vocabSize - 1; }
  int64_t resolvedBosId() const { return bosTokenId < 0 ? specialTokenId() : bosTokenId; }
  int64_t resolvedEosId() const { return eosTokenId < 0 ? specialTokenId() : eosTokenId; }
  int64_t resolvedHeadDim() const { return headDim > 0 ? headDim : hiddenSize / numHeads; }
  /// Throws UsageError naming the first field that is inconsistent.
  void validate() const;
};

/// "gpt2" -> Architecture::Gpt2 etc.; throws UsageError listing the supported names.
Architecture parseArchitecture(const std::string& name);
/// "v4" / "v5"; throws UsageError.
ConfigStyle parseConfigStyle(const std::string& name);
/// "F32" / "F16" / "BF16" (case-insensitive); throws UsageError.
SafetensorsDtype parseStoredDtype(const std::string& name);

}  // namespace kvscope
