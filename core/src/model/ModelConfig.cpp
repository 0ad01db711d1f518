#include "kvscope/ModelConfig.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kvscope/Error.hpp"
#include "util/UntrustedJson.hpp"

namespace kvscope {

using nlohmann::json;

namespace {

class ConfigReader {
 public:
  ConfigReader(const json& doc, std::string file) : doc_(doc), file_(std::move(file)) {}

  bool has(const char* key) const { return doc_.contains(key) && !doc_[key].is_null(); }

  int64_t requireInt(const char* key) const {
    if (!has(key)) throw InputError(file_, key, "missing (required for this model type)");
    return asInt(doc_[key], key);
  }
  int64_t intOr(const char* key, int64_t fallback) const {
    return has(key) ? asInt(doc_[key], key) : fallback;
  }
  double doubleOr(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    if (!doc_[key].is_number()) throw InputError(file_, key, "expected a number");
    return doc_[key].get<double>();
  }
  bool boolOr(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!doc_[key].is_boolean()) throw InputError(file_, key, "expected true or false");
    return doc_[key].get<bool>();
  }
  std::string stringOr(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!doc_[key].is_string()) throw InputError(file_, key, "expected a string");
    return doc_[key].get<std::string>();
  }
  std::optional<int64_t> optionalInt(const char* key) const {
    if (!has(key)) return std::nullopt;
    return asInt(doc_[key], key);
  }
  std::vector<int64_t> intList(const char* key) const {
    std::vector<int64_t> out;
    if (!has(key)) return out;
    const auto& v = doc_[key];
    if (v.is_array()) {
      for (const auto& x : v) out.push_back(asInt(x, key));
    } else {
      out.push_back(asInt(v, key));
    }
    return out;
  }
  const json& doc() const { return doc_; }
  const std::string& file() const { return file_; }

  int64_t asInt(const json& v, const std::string& key) const {
    if (v.is_number_integer()) {
      if (auto i = jsonInt64(v)) return *i;
      throw InputError(file_, key, "integer " + v.dump() + " is out of range");
    }
    if (v.is_number_float()) {
      if (auto i = doubleToInt64(v.get<double>())) return *i;
      throw InputError(file_, key, "expected an integer, found " + jsonPreview(v));
    }
    throw InputError(file_, key, "expected an integer, found " + jsonPreview(v));
  }

 private:
  const json& doc_;
  std::string file_;
};

void requirePositive(const std::string& file, const char* key, int64_t v) {
  if (v <= 0) throw InputError(file, key, "must be positive, found " + std::to_string(v));
}

// A size that later allocations and products are computed from: positive and at most
// `limit` (docs/limits.md), so no product of them overflows.
void requireSize(const std::string& file, const char* key, int64_t v, int64_t limit) {
  requirePositive(file, key, v);
  if (v > limit)
    throw InputError(file, key,
                     std::to_string(v) + " exceeds the limit of " + std::to_string(limit));
}

// rope_parameters (transformers 5) or rope_theta + rope_scaling (transformers 4).
RopeConfig parseRope(const ConfigReader& r) {
  RopeConfig rope;
  const json* params = nullptr;
  std::string where;
  if (r.has("rope_parameters")) {
    params = &r.doc()["rope_parameters"];
    where = "rope_parameters";
  } else if (r.has("rope_scaling")) {
    params = &r.doc()["rope_scaling"];
    where = "rope_scaling";
  }
  rope.theta = r.doubleOr("rope_theta", 10000.0);
  rope.partialRotaryFactor = r.doubleOr("partial_rotary_factor", 1.0);
  // A non-positive base makes every inverse frequency NaN (silently NaN logits).
  auto checkTheta = [&](const std::string& field) {
    if (!(rope.theta > 0) || !std::isfinite(rope.theta))
      throw InputError(r.file(), field, "must be a positive number, found " + std::to_string(rope.theta));
  };
  if (!params) {
    checkTheta("rope_theta");
    return rope;
  }
  if (!params->is_object()) throw InputError(r.file(), where, "expected an object");
  // transformers 5 may key rope_parameters by layer type; use the full-attention entry.
  const json* p = params;
  if (!p->contains("rope_type") && !p->contains("type") && !p->contains("rope_theta") &&
      p->contains("full_attention")) {
    p = &(*params)["full_attention"];
    where += ".full_attention";
  }
  auto num = [&](const char* key, double fallback) {
    if (!p->contains(key) || (*p)[key].is_null()) return fallback;
    if (!(*p)[key].is_number()) throw InputError(r.file(), where + "." + key, "expected a number");
    return (*p)[key].get<double>();
  };
  if (p->contains("rope_type") && (*p)["rope_type"].is_string())
    rope.type = (*p)["rope_type"].get<std::string>();
  else if (p->contains("type") && (*p)["type"].is_string())
    rope.type = (*p)["type"].get<std::string>();
  rope.theta = num("rope_theta", rope.theta);
  checkTheta(p->contains("rope_theta") ? where + ".rope_theta" : std::string("rope_theta"));
  rope.factor = num("factor", 1.0);
  rope.lowFreqFactor = num("low_freq_factor", 1.0);
  rope.highFreqFactor = num("high_freq_factor", 4.0);
  {
    const double omp = num("original_max_position_embeddings", 0);
    const auto asInt = doubleToInt64(omp);
    if (!asInt || *asInt < 0 || *asInt > limits::kPositions)
      throw InputError(r.file(), where + ".original_max_position_embeddings",
                       "expected an integer in [0, " + std::to_string(limits::kPositions) +
                           "], found " + jsonPreview(json(omp)));
    rope.originalMaxPositions = *asInt;
  }
  rope.partialRotaryFactor = num("partial_rotary_factor", rope.partialRotaryFactor);
  if (rope.type != "default" && rope.type != "linear" && rope.type != "dynamic" &&
      rope.type != "llama3") {
    throw InputError(r.file(), where + ".rope_type",
                     "unsupported RoPE scaling '" + rope.type +
                         "' (supported: default, linear, dynamic, llama3)");
  }
  if (rope.type != "default" && !(rope.factor > 0))
    throw InputError(r.file(), where + ".factor", "must be positive");
  if (rope.type == "llama3" && rope.originalMaxPositions <= 0)
    throw InputError(r.file(), where + ".original_max_position_embeddings",
                     "required for llama3 RoPE scaling");
  if (rope.type == "llama3" && !(rope.highFreqFactor > rope.lowFreqFactor))
    throw InputError(r.file(), where + ".high_freq_factor",
                     "must exceed low_freq_factor for llama3 RoPE scaling (the smoothing divides "
                     "by their difference)");
  return rope;
}

}  // namespace

std::string architectureName(Architecture a) {
  switch (a) {
    case Architecture::Gpt2: return "gpt2";
    case Architecture::Llama: return "llama";
    case Architecture::Mistral: return "mistral";
    case Architecture::Qwen2: return "qwen2";
    case Architecture::Qwen3: return "qwen3";
  }
  return "?";
}

std::string supportedModelTypes() { return "gpt2, llama, mistral, qwen2, qwen3"; }

bool RopeConfig::operator==(const RopeConfig& o) const {
  return type == o.type && theta == o.theta && factor == o.factor &&
         lowFreqFactor == o.lowFreqFactor && highFreqFactor == o.highFreqFactor &&
         originalMaxPositions == o.originalMaxPositions &&
         partialRotaryFactor == o.partialRotaryFactor;
}

bool ModelConfig::isSlidingLayer(int64_t layer) const {
  return slidingWindow > 0 && layer >= 0 && layer < static_cast<int64_t>(slidingLayers.size()) &&
         slidingLayers[static_cast<size_t>(layer)];
}

ModelConfig ModelConfig::fromJson(const json& doc, const std::string& file) {
  if (!doc.is_object()) throw InputError(file, "", "expected a JSON object");
  ConfigReader r(doc, file);
  ModelConfig c;
  c.sourceFile = file;
  c.modelType = r.stringOr("model_type", "");
  if (c.modelType.empty())
    throw InputError(file, "model_type", "missing (supported: " + supportedModelTypes() + ")");
  if (c.modelType == "gpt2") {
    c.architecture = Architecture::Gpt2;
  } else if (c.modelType == "llama") {
    c.architecture = Architecture::Llama;
  } else if (c.modelType == "mistral") {
    c.architecture = Architecture::Mistral;
  } else if (c.modelType == "qwen2") {
    c.architecture = Architecture::Qwen2;
  } else if (c.modelType == "qwen3") {
    c.architecture = Architecture::Qwen3;
  } else {
    throw InputError(file, "model_type",
                     "unsupported model type '" + c.modelType +
                         "' (supported: " + supportedModelTypes() + ")");
  }
  c.dtype = r.stringOr("dtype", r.stringOr("torch_dtype", "float32"));
  c.vocabSize = r.requireInt("vocab_size");
  requireSize(file, "vocab_size", c.vocabSize, limits::kVocab);
  c.eosTokenIds = r.intList("eos_token_id");
  c.bosTokenId = r.optionalInt("bos_token_id");
  c.padTokenId = r.optionalInt("pad_token_id");

  if (c.architecture == Architecture::Gpt2) {
    c.hiddenSize = r.requireInt("n_embd");
    c.numHeads = r.requireInt("n_head");
    c.numLayers = r.requireInt("n_layer");
    c.maxPositions = r.requireInt("n_positions");
    requireSize(file, "n_embd", c.hiddenSize, limits::kHiddenSize);
    requireSize(file, "n_head", c.numHeads, limits::kHeads);
    requireSize(file, "n_layer", c.numLayers, limits::kLayers);
    requireSize(file, "n_positions", c.maxPositions, limits::kPositions);
    if (c.hiddenSize % c.numHeads != 0)
      throw InputError(file, "n_head", "n_embd " + std::to_string(c.hiddenSize) +
                                           " is not divisible by n_head " + std::to_string(c.numHeads));
    c.numKvHeads = c.numHeads;
    c.headDim = c.hiddenSize / c.numHeads;
    c.intermediateSize = r.intOr("n_inner", 4 * c.hiddenSize);  // hidden <= 2^20: no overflow
    requireSize(file, "n_inner", c.intermediateSize, limits::kIntermediateSize);
    c.normEps = r.doubleOr("layer_norm_epsilon", 1e-5);
    c.activation = r.stringOr("activation_function", "gelu_new");
    c.tieWordEmbeddings = r.boolOr("tie_word_embeddings", true);
    c.qkvBias = c.outputProjBias = c.mlpBias = true;
    c.scaleAttnByInverseLayerIdx = r.boolOr("scale_attn_by_inverse_layer_idx", false);
    if (!r.boolOr("scale_attn_weights", true))
      throw InputError(file, "scale_attn_weights", "only true is supported");
  } else {
    c.hiddenSize = r.requireInt("hidden_size");
    c.numHeads = r.requireInt("num_attention_heads");
    c.numLayers = r.requireInt("num_hidden_layers");
    c.intermediateSize = r.requireInt("intermediate_size");
    c.maxPositions = r.requireInt("max_position_embeddings");
    requireSize(file, "hidden_size", c.hiddenSize, limits::kHiddenSize);
    requireSize(file, "num_attention_heads", c.numHeads, limits::kHeads);
    requireSize(file, "num_hidden_layers", c.numLayers, limits::kLayers);
    requireSize(file, "intermediate_size", c.intermediateSize, limits::kIntermediateSize);
    requireSize(file, "max_position_embeddings", c.maxPositions, limits::kPositions);
    c.numKvHeads = r.intOr("num_key_value_heads", c.numHeads);
    requireSize(file, "num_key_value_heads", c.numKvHeads, limits::kHeads);
    if (c.numHeads % c.numKvHeads != 0)
      throw InputError(file, "num_key_value_heads",
                       std::to_string(c.numKvHeads) + " does not divide num_attention_heads " +
                           std::to_string(c.numHeads));
    c.headDim = r.intOr("head_dim", 0);
    if (c.headDim == 0) {
      if (c.hiddenSize % c.numHeads != 0)
        throw InputError(file, "head_dim", "absent and hidden_size is not divisible by heads");
      c.headDim = c.hiddenSize / c.numHeads;
    }
    requireSize(file, "head_dim", c.headDim, limits::kHeadDim);
    c.normEps = r.doubleOr("rms_norm_eps", 1e-6);
    c.activation = r.stringOr("hidden_act", "silu");
    c.rope = parseRope(r);
    if (c.rope.partialRotaryFactor != 1.0)
      throw InputError(file, "partial_rotary_factor", "only 1.0 is supported");
    if (c.headDim % 2 != 0) throw InputError(file, "head_dim", "RoPE needs an even head_dim");
    c.mlpBias = r.boolOr("mlp_bias", false);
    if (c.architecture == Architecture::Qwen2) {
      c.tieWordEmbeddings = r.boolOr("tie_word_embeddings", false);
      c.qkvBias = true;
      c.outputProjBias = false;
    } else {
      c.tieWordEmbeddings = r.boolOr("tie_word_embeddings", false);
      c.qkvBias = c.outputProjBias = r.boolOr("attention_bias", false);
    }
    c.qkNorm = c.architecture == Architecture::Qwen3;
    // Qwen2 and Qwen3 switch their windows on with use_sliding_window (from
    // max_window_layers on); Mistral's sliding_window alone applies to every layer.
    const bool windowSwitch =
        c.architecture == Architecture::Qwen2 || c.architecture == Architecture::Qwen3;
    c.slidingLayers.assign(static_cast<size_t>(c.numLayers), false);
    const int64_t window = r.intOr("sliding_window", 0);
    if (c.architecture == Architecture::Mistral && window > 0) {
      c.slidingWindow = window;
      c.slidingLayers.assign(static_cast<size_t>(c.numLayers), true);
    } else if (windowSwitch && r.boolOr("use_sliding_window", false) && window > 0) {
      c.slidingWindow = window;
      const int64_t maxWindowLayers = r.intOr("max_window_layers", c.numLayers);
      for (int64_t i = 0; i < c.numLayers; ++i)
        c.slidingLayers[static_cast<size_t>(i)] = i >= maxWindowLayers;
    }
    // transformers 5 writes the per-layer choice explicitly; it wins when present.
    if (r.has("layer_types") && window > 0 &&
        (!windowSwitch || r.boolOr("use_sliding_window", false))) {
      const auto& lt = doc["layer_types"];
      if (!lt.is_array() || static_cast<int64_t>(lt.size()) != c.numLayers)
        throw InputError(file, "layer_types", "expected one entry per layer");
      c.slidingWindow = window;
      for (size_t i = 0; i < lt.size(); ++i) {
        if (!lt[i].is_string()) throw InputError(file, "layer_types", "expected strings");
        c.slidingLayers[i] = lt[i].get<std::string>() == "sliding_attention";
      }
    }
  }
  if (c.activation != "gelu_new" && c.activation != "gelu" && c.activation != "gelu_pytorch_tanh" &&
      c.activation != "silu" && c.activation != "relu") {
    throw InputError(file, c.architecture == Architecture::Gpt2 ? "activation_function" : "hidden_act",
                     "unsupported activation '" + c.activation +
                         "' (supported: gelu_new, gelu, gelu_pytorch_tanh, silu, relu)");
  }
  for (int64_t id : c.eosTokenIds)
    if (id < 0 || id >= c.vocabSize)
      throw InputError(file, "eos_token_id", std::to_string(id) + " is outside the vocabulary");
  return c;
}

ModelConfig ModelConfig::load(const std::string& path) {
  {
    std::ifstream in(path);
    if (!in) throw InputError(path, "", "cannot open config file");
  }
  return fromJson(parseUntrustedJsonFile(path), path);
}

void ModelConfig::mergeGenerationConfig(const std::string& path) {
  if (!std::filesystem::exists(path)) return;
  const json doc = parseUntrustedJsonFile(path);
  if (!doc.is_object()) throw InputError(path, "", "expected a JSON object");
  ConfigReader r(doc, path);
  for (int64_t id : r.intList("eos_token_id")) {
    if (id < 0 || id >= vocabSize)
      throw InputError(path, "eos_token_id", std::to_string(id) + " is outside the vocabulary");
    if (std::find(eosTokenIds.begin(), eosTokenIds.end(), id) == eosTokenIds.end())
      eosTokenIds.push_back(id);
  }
}

}  // namespace kvscope
