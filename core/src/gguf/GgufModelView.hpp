// A GGUF checkpoint seen as the HuggingFace checkpoint it was converted from
// (llama.cpp's convert_hf_to_gguf.py run backwards): the config.json keys from the
// `{arch}.*` metadata, the generation config from `tokenizer.ggml.*`, and each tensor under
// its HuggingFace name with its HuggingFace shape (GGUF lists dimensions innermost first).
// llama.cpp's llama architecture turns rotary pairs (i, i + 1); the converter permutes each
// head's q and k rows so that this equals HF's (i, i + d/2): that permutation is recorded
// per weight, to be undone when it is loaded.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvscope/GgufFile.hpp"

namespace kvscope::detail {

/// How llama.cpp runs a HuggingFace family (convert_hf_to_gguf.py's mapping): its GGUF
/// architecture, and whether the converter permuted each head's q/k rows into rotary pairs
/// (i, i + 1), so that llama.cpp's K cache holds every key head in that permuted order too.
/// `weights`: KV Scope reads the architecture's GGUF checkpoints too; a family it audits from
/// llama.cpp's cache states only (the reference from its HF checkpoint) has false.
struct LlamaCppArchitecture {
  const char* gguf;
  const char* modelType;
  bool permutesQk;
  bool weights = true;
};
/// The entry of a `model_type` KV Scope reads from llama.cpp (GGUF files, cache states), or
/// nullptr.
const LlamaCppArchitecture* llamaCppArchitectureOf(const std::string& modelType);
/// "llama, qwen2, qwen3, mistral": those model_types, for messages.
std::string llamaCppModelTypes();

struct GgufWeight {
  const GgufTensorInfo* tensor = nullptr;
  std::vector<int64_t> shape;  // HuggingFace order: [out, in] for a matrix
  int64_t permutedHeads = 0;   // heads whose rows convert_hf_to_gguf.py permuted (0: none)
};

class GgufModelView {
 public:
  /// Reads the metadata and names the tensors. Throws InputError naming the file and the
  /// key for an architecture KV Scope does not read from GGUF, a missing or mistyped key, or
  /// a feature it cannot reproduce (per-layer head counts, YaRN).
  explicit GgufModelView(std::shared_ptr<const GgufFile> file);

  const GgufFile& file() const { return *file_; }
  /// config.json as transformers would have it: model_type, sizes, RoPE, norms, ties, ids.
  const nlohmann::json& config() const { return config_; }
  const std::map<std::string, GgufWeight>& weights() const { return weights_; }
  /// rope_freqs.weight (Llama 3's scaling as llama.cpp stores it), empty when absent: the
  /// checkpoint's RopeConfig::frequencyFactors (no config.json key holds them).
  const std::vector<double>& frequencyFactors() const { return frequencyFactors_; }
  /// The GGUF architectures read, with their model_type: "llama (llama), qwen2 (qwen2), ...".
  static std::string supportedArchitectures();

 private:
  std::shared_ptr<const GgufFile> file_;
  nlohmann::json config_;
  std::map<std::string, GgufWeight> weights_;
  std::vector<double> frequencyFactors_;
};

}  // namespace kvscope::detail
