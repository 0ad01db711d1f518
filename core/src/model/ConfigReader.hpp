// Typed reads of a HuggingFace config.json object, each naming the file and the key in its
// error: what every family file reads its keys with.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvscope/ModelConfig.hpp"

namespace kvscope {

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& doc, std::string file) : doc_(doc), file_(std::move(file)) {}

  bool has(const char* key) const { return doc_.contains(key) && !doc_[key].is_null(); }
  int64_t requireInt(const char* key) const;
  int64_t intOr(const char* key, int64_t fallback) const;
  double doubleOr(const char* key, double fallback) const;
  bool boolOr(const char* key, bool fallback) const;
  std::string stringOr(const char* key, const std::string& fallback) const;
  std::optional<int64_t> optionalInt(const char* key) const;
  /// An integer or a list of integers (eos_token_id); empty when absent.
  std::vector<int64_t> intList(const char* key) const;
  /// A required size that later allocations are computed from: positive and at most `limit`
  /// (docs/limits.md), so no product of them overflows.
  int64_t requireSize(const char* key, int64_t limit) const;
  /// A size read elsewhere (a default), held to the same rule under `key`'s name.
  void checkSize(const char* key, int64_t value, int64_t limit) const;
  int64_t asInt(const nlohmann::json& v, const std::string& key) const;
  /// An activation name the kit computes (gelu_new, gelu, gelu_pytorch_tanh, silu, relu).
  std::string activation(const char* key, const char* fallback) const;

  const nlohmann::json& doc() const { return doc_; }
  const std::string& file() const { return file_; }

 private:
  const nlohmann::json& doc_;
  std::string file_;
};

/// rope_parameters (transformers 5, also keyed by layer type: the full-attention entry) or
/// rope_theta + rope_scaling (transformers 4, `type` or `rope_type`), and
/// partial_rotary_factor. `defaultTheta`: rope_theta when the config names none (the family's
/// config class default). Throws InputError naming the field.
/// `defaultOriginal`: the top-level original_max_position_embeddings the family's config class
/// has when the file leaves it out (Phi-3: 4096; 0: none), which yarn and longrope take over
/// their own entry, as transformers' standardize_rope_params does.
RopeConfig readRope(const ConfigReader& r, double defaultTheta = 10000.0, int64_t defaultOriginal = 0,
                    double defaultPartialRotary = 1.0);
/// longrope's short_factor and long_factor must hold one divisor per rotary pair
/// (`rotaryDim` / 2); InputError naming `where`.short_factor / long_factor otherwise.
void checkRopeForRotaryDim(const ConfigReader& r, const RopeConfig& rope, int64_t rotaryDim,
                           const std::string& where);
/// rope_parameters' entry for `layerType` ("sliding_attention") when rope_parameters is keyed
/// by layer type (transformers 5, Gemma 3); nullopt otherwise. Keys it leaves out keep
/// `defaults` (type, theta, partial rotary).
std::optional<RopeConfig> readLayerTypeRope(const ConfigReader& r, const std::string& layerType,
                                            const RopeConfig& defaults);
/// `defaults` with its theta from `key` where the config has it (transformers 4's
/// rope_local_base_freq); InputError naming `key` for a base that is not a positive number.
RopeConfig readRopeTheta(const ConfigReader& r, const char* key, const RopeConfig& defaults);

}  // namespace kvscope
