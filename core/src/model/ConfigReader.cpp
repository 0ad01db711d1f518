#include "model/ConfigReader.hpp"

#include <cmath>

#include "kvscope/Error.hpp"
#include "util/InputLimits.hpp"
#include "util/UntrustedJson.hpp"

namespace kvscope {

using nlohmann::json;

int64_t ConfigReader::requireInt(const char* key) const {
  if (!has(key)) throw InputError(file_, key, "missing (required for this model type)");
  return asInt(doc_[key], key);
}

int64_t ConfigReader::intOr(const char* key, int64_t fallback) const {
  return has(key) ? asInt(doc_[key], key) : fallback;
}

double ConfigReader::doubleOr(const char* key, double fallback) const {
  if (!has(key)) return fallback;
  if (!doc_[key].is_number()) throw InputError(file_, key, "expected a number");
  return doc_[key].get<double>();
}

bool ConfigReader::boolOr(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!doc_[key].is_boolean()) throw InputError(file_, key, "expected true or false");
  return doc_[key].get<bool>();
}

std::string ConfigReader::stringOr(const char* key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  if (!doc_[key].is_string()) throw InputError(file_, key, "expected a string");
  return doc_[key].get<std::string>();
}

std::optional<int64_t> ConfigReader::optionalInt(const char* key) const {
  if (!has(key)) return std::nullopt;
  return asInt(doc_[key], key);
}

std::vector<int64_t> ConfigReader::intList(const char* key) const {
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

int64_t ConfigReader::requireSize(const char* key, int64_t limit) const {
  const int64_t v = requireInt(key);
  checkSize(key, v, limit);
  return v;
}

void ConfigReader::checkSize(const char* key, int64_t v, int64_t limit) const {
  if (v <= 0) throw InputError(file_, key, "must be positive, found " + std::to_string(v));
  if (v > limit)
    throw InputError(file_, key, std::to_string(v) + " exceeds the limit of " + std::to_string(limit));
}

std::string ConfigReader::activation(const char* key, const char* fallback) const {
  const std::string a = stringOr(key, fallback);
  if (a != "gelu_new" && a != "gelu" && a != "gelu_pytorch_tanh" && a != "silu" && a != "relu")
    throw InputError(file_, key,
                     "unsupported activation '" + a +
                         "' (supported: gelu_new, gelu, gelu_pytorch_tanh, silu, relu)");
  return a;
}

int64_t ConfigReader::asInt(const json& v, const std::string& key) const {
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

namespace {

std::vector<double> factorList(const ConfigReader& r, const json& p, const std::string& where,
                               const char* key) {
  std::vector<double> out;
  if (!p.contains(key) || !p[key].is_array())
    throw InputError(r.file(), where + "." + key, "expected a list of numbers (required for longrope)");
  if (p[key].size() > static_cast<size_t>(limits::kHeadDim))
    throw InputError(r.file(), where + "." + key, "longer than any head");
  for (const auto& v : p[key]) {
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
      throw InputError(r.file(), where + "." + key, "expected positive numbers, found " + jsonPreview(v));
    out.push_back(v.get<double>());
  }
  return out;
}

// yarn's and longrope's keys (transformers' _compute_yarn_parameters and
// _compute_longrope_parameters). The factor and the original context are resolved as
// transformers resolves them: an absent factor is max_position_embeddings / original, the
// top-level original_max_position_embeddings (Phi-3's) wins over the entry's, and an absent
// one is max_position_embeddings.
void readYarnLongRope(const ConfigReader& r, const json& p, const std::string& where, RopeConfig& rope) {
  auto num = [&](const char* key, double fallback) {
    if (!p.contains(key) || p[key].is_null()) return fallback;
    if (!p[key].is_number()) throw InputError(r.file(), where + "." + key, "expected a number");
    return p[key].get<double>();
  };
  const int64_t maxPositions = r.intOr("max_position_embeddings", 0);
  if (rope.originalMaxPositions <= 0) rope.originalMaxPositions = maxPositions;
  if (rope.originalMaxPositions <= 0)
    throw InputError(r.file(), where + ".original_max_position_embeddings",
                     "required for " + rope.type + " RoPE scaling");
  if (!p.contains("factor") || p["factor"].is_null()) {
    if (maxPositions <= 0)
      throw InputError(r.file(), where + ".factor", "absent, and no max_position_embeddings to derive it from");
    rope.factor = static_cast<double>(maxPositions) / static_cast<double>(rope.originalMaxPositions);
  }
  rope.attentionFactor = num("attention_factor", 0.0);
  if (rope.attentionFactor < 0 || !std::isfinite(rope.attentionFactor))
    throw InputError(r.file(), where + ".attention_factor", "must be a positive number");
  if (rope.type == "longrope") {
    rope.shortFactor = factorList(r, p, where, "short_factor");
    rope.longFactor = factorList(r, p, where, "long_factor");
    return;
  }
  // `or 32` / `or 1` in transformers: a 0 or null takes the default.
  rope.betaFast = num("beta_fast", 0.0);
  if (rope.betaFast == 0) rope.betaFast = 32.0;
  rope.betaSlow = num("beta_slow", 0.0);
  if (rope.betaSlow == 0) rope.betaSlow = 1.0;
  if (!(rope.betaFast > 0) || !(rope.betaSlow > 0) || !std::isfinite(rope.betaFast) || !std::isfinite(rope.betaSlow))
    throw InputError(r.file(), where + ".beta_fast", "beta_fast and beta_slow must be positive numbers");
  rope.mscale = num("mscale", 0.0);
  rope.mscaleAllDim = num("mscale_all_dim", 0.0);
  if (!std::isfinite(rope.mscale) || !std::isfinite(rope.mscaleAllDim))
    throw InputError(r.file(), where + ".mscale", "must be a finite number");
  if (p.contains("truncate") && !p["truncate"].is_null()) {
    if (!p["truncate"].is_boolean()) throw InputError(r.file(), where + ".truncate", "expected true or false");
    rope.truncate = p["truncate"].get<bool>();
  }
}

// One RoPE object (a rope_scaling / rope_parameters entry) at `where` over `rope`'s defaults.
// `topOriginal`: the top-level original_max_position_embeddings yarn and longrope take over
// the entry's (0: none; the single-entry form only, as transformers' standardize_rope_params).
RopeConfig readRopeObject(const ConfigReader& r, const json& p, const std::string& where, RopeConfig rope,
                          int64_t topOriginal = 0) {
  if (!p.is_object()) throw InputError(r.file(), where, "expected an object");
  auto num = [&](const char* key, double fallback) {
    if (!p.contains(key) || p[key].is_null()) return fallback;
    if (!p[key].is_number()) throw InputError(r.file(), where + "." + key, "expected a number");
    return p[key].get<double>();
  };
  if (p.contains("rope_type") && p["rope_type"].is_string())
    rope.type = p["rope_type"].get<std::string>();
  else if (p.contains("type") && p["type"].is_string())
    rope.type = p["type"].get<std::string>();
  rope.theta = num("rope_theta", rope.theta);
  if (!(rope.theta > 0) || !std::isfinite(rope.theta))  // NaN inverse frequencies otherwise
    throw InputError(r.file(), p.contains("rope_theta") ? where + ".rope_theta" : std::string("rope_theta"),
                     "must be a positive number, found " + std::to_string(rope.theta));
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
      rope.type != "llama3" && rope.type != "yarn" && rope.type != "longrope") {
    throw InputError(r.file(), where + ".rope_type",
                     "unsupported RoPE scaling '" + rope.type +
                         "' (supported: default, linear, dynamic, llama3, yarn, longrope)");
  }
  if (rope.type == "yarn" || rope.type == "longrope") {
    if (topOriginal > 0) rope.originalMaxPositions = topOriginal;
    readYarnLongRope(r, p, where, rope);
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

// rope_parameters keyed by layer type (transformers 5: {"full_attention": {...}, ...}).
bool keyedByLayerType(const json& p) {
  return p.is_object() && !p.contains("rope_type") && !p.contains("type") && !p.contains("rope_theta") &&
         (p.contains("full_attention") || p.contains("sliding_attention"));
}

}  // namespace

namespace {
// What every RoPE entry starts from: the top-level rope_theta and partial_rotary_factor.
RopeConfig readRopeDefaults(const ConfigReader& r, double defaultTheta, double defaultPartialRotary) {
  RopeConfig rope;
  rope.theta = r.doubleOr("rope_theta", defaultTheta);
  rope.partialRotaryFactor = r.doubleOr("partial_rotary_factor", defaultPartialRotary);
  return rope;
}
}  // namespace

void checkRopeForRotaryDim(const ConfigReader& r, const RopeConfig& rope, int64_t rotaryDim,
                           const std::string& where) {
  if (rope.type != "longrope") return;
  for (const auto* list : {&rope.shortFactor, &rope.longFactor})
    if (static_cast<int64_t>(list->size()) != rotaryDim / 2)
      throw InputError(r.file(), where + (list == &rope.shortFactor ? ".short_factor" : ".long_factor"),
                       std::to_string(list->size()) + " entries; longrope needs one per rotary pair (" +
                           std::to_string(rotaryDim / 2) + ")");
}

// rope_parameters (transformers 5) or rope_theta + rope_scaling (transformers 4).
RopeConfig readRope(const ConfigReader& r, double defaultTheta, int64_t defaultOriginal,
                    double defaultPartialRotary) {
  RopeConfig rope = readRopeDefaults(r, defaultTheta, defaultPartialRotary);
  const int64_t top = r.intOr("original_max_position_embeddings", defaultOriginal);
  if (top < 0 || top > limits::kPositions)
    throw InputError(r.file(), "original_max_position_embeddings",
                     "expected an integer in [0, " + std::to_string(limits::kPositions) + "]");
  if (r.has("rope_parameters")) {
    const json& params = r.doc()["rope_parameters"];
    if (keyedByLayerType(params)) {  // the full-attention entry is the model's RoPE
      if (!params.contains("full_attention") || params["full_attention"].is_null())
        return readRopeObject(r, json::object(), "rope_parameters.full_attention", rope);
      return readRopeObject(r, params["full_attention"], "rope_parameters.full_attention", rope);
    }
    return readRopeObject(r, params, "rope_parameters", rope, top);
  }
  if (r.has("rope_scaling") && !r.doc()["rope_scaling"].is_null())
    return readRopeObject(r, r.doc()["rope_scaling"], "rope_scaling", rope, top);
  return readRopeObject(r, json::object(), "rope_theta", rope);
}

std::optional<RopeConfig> readLayerTypeRope(const ConfigReader& r, const std::string& layerType,
                                            const RopeConfig& defaults) {
  if (!r.has("rope_parameters") || !keyedByLayerType(r.doc()["rope_parameters"])) return std::nullopt;
  const json& params = r.doc()["rope_parameters"];
  if (!params.contains(layerType) || params[layerType].is_null()) return std::nullopt;
  return readRopeObject(r, params[layerType], "rope_parameters." + layerType, defaults);
}

RopeConfig readRopeTheta(const ConfigReader& r, const char* key, const RopeConfig& defaults) {
  RopeConfig rope = defaults;
  rope.theta = r.doubleOr(key, defaults.theta);
  if (!(rope.theta > 0) || !std::isfinite(rope.theta))
    throw InputError(r.file(), key, "must be a positive number, found " + std::to_string(rope.theta));
  return rope;
}

}  // namespace kvscope
