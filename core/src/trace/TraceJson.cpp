#include "trace/TraceJson.hpp"

#include <cmath>
#include <cstdio>
#include <optional>

#include "kvscope/Error.hpp"
#include "trace/JsonFieldReader.hpp"
#include "trace/TraceKvCacheJson.hpp"
#include "trace/TraceRingLayers.hpp"
#include "util/InputLimits.hpp"

namespace kvscope::detail {

using nlohmann::json;

std::string checksumHex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::vector<int64_t> recordedLayersFromJson(const JsonFieldReader& top, int64_t numLayers) {
  const char* field = "recorded_layers";
  if (!top.has(field)) return {};
  const std::vector<int64_t> layers = top.ints(field);
  if (layers.empty())
    top.fail(field,
             "expected one or more layer indices (leave the field out when the trace holds every "
             "layer)");
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string entry = top.at(field) + "[" + std::to_string(i) + "]";
    if (layers[i] < 0 || layers[i] >= numLayers)
      throw InputError(top.file(), entry,
                       "layer " + std::to_string(layers[i]) + " is outside the model's layers 0.." +
                           std::to_string(numLayers - 1) + " (model.num_layers " +
                           std::to_string(numLayers) + ")");
    if (i > 0 && layers[i] <= layers[i - 1])
      throw InputError(top.file(), entry,
                       "layer " + std::to_string(layers[i]) + " after layer " +
                           std::to_string(layers[i - 1]) +
                           ": the layer indices must be strictly increasing");
  }
  return layers;
}

namespace {
// model.rope_parameters, in HuggingFace's rope_parameters names (docs/trace-format.md).
json ropeToJson(const RopeConfig& r) {
  json j = {{"rope_type", r.type}, {"rope_theta", r.theta}, {"factor", r.factor}};
  if (r.type == "llama3") {
    j["low_freq_factor"] = r.lowFreqFactor;
    j["high_freq_factor"] = r.highFreqFactor;
  }
  if (r.originalMaxPositions > 0) j["original_max_position_embeddings"] = r.originalMaxPositions;
  if (r.type == "yarn" || r.type == "longrope") {
    if (r.attentionFactor > 0) j["attention_factor"] = r.attentionFactor;
    if (r.type == "yarn") {
      j["beta_fast"] = r.betaFast;
      j["beta_slow"] = r.betaSlow;
      if (r.mscale != 0) j["mscale"] = r.mscale;
      if (r.mscaleAllDim != 0) j["mscale_all_dim"] = r.mscaleAllDim;
      j["truncate"] = r.truncate;
    } else {
      j["short_factor"] = r.shortFactor;
      j["long_factor"] = r.longFactor;
    }
  }
  return j;
}

std::optional<RopeConfig> ropeFromJson(const JsonFieldReader& m) {
  if (!m.has("rope_parameters")) return std::nullopt;
  if (!m.child("rope_parameters").is_object()) m.fail("rope_parameters", "expected an object");
  JsonFieldReader r(m.child("rope_parameters"), m.file(), m.at("rope_parameters"));
  RopeConfig rope;
  rope.type = r.string("rope_type", "default");
  if (rope.type != "default" && rope.type != "linear" && rope.type != "llama3" &&
      rope.type != "dynamic" && rope.type != "yarn" && rope.type != "longrope")
    r.fail("rope_type", "unknown RoPE type '" + rope.type +
                            "' (known: default, linear, llama3, dynamic, yarn, longrope)");
  auto positive = [&](const char* k, double fallback) {
    if (r.has(k) && !r.json()[k].is_number())
      r.fail(k, "expected a number, found " + jsonPreview(r.json()[k]));
    const double v = r.has(k) ? r.json()[k].get<double>() : fallback;
    if (!(v > 0) || !std::isfinite(v)) r.fail(k, "must be a positive number");
    return v;
  };
  rope.theta = positive("rope_theta", 10000.0);
  rope.factor = positive("factor", 1.0);
  rope.lowFreqFactor = positive("low_freq_factor", 1.0);
  rope.highFreqFactor = positive("high_freq_factor", 4.0);
  rope.originalMaxPositions =
      r.has("original_max_position_embeddings")
          ? r.integerIn("original_max_position_embeddings", 1, limits::kPositions)
          : 0;
  if ((rope.type == "llama3" || rope.type == "yarn" || rope.type == "longrope") &&
      rope.originalMaxPositions <= 0)
    r.fail("original_max_position_embeddings", "required for " + rope.type + " RoPE scaling");
  if (rope.type == "yarn" || rope.type == "longrope") {
    rope.attentionFactor = r.has("attention_factor") ? positive("attention_factor", 1.0) : 0.0;
    rope.betaFast = positive("beta_fast", 32.0);
    rope.betaSlow = positive("beta_slow", 1.0);
    auto finite = [&](const char* k) {
      if (!r.has(k)) return 0.0;
      if (!r.json()[k].is_number() || !std::isfinite(r.json()[k].get<double>())) r.fail(k, "expected a number");
      return r.json()[k].get<double>();
    };
    rope.mscale = finite("mscale");
    rope.mscaleAllDim = finite("mscale_all_dim");
    if (r.has("truncate")) {
      if (!r.json()["truncate"].is_boolean()) r.fail("truncate", "expected true or false");
      rope.truncate = r.json()["truncate"].get<bool>();
    }
    auto factors = [&](const char* k) {
      std::vector<double> out;
      if (!r.has(k)) {
        if (rope.type == "longrope") r.fail(k, "required for longrope");
        return out;
      }
      const json& a = r.json()[k];
      if (!a.is_array() || a.size() > static_cast<size_t>(limits::kHeadDim)) r.fail(k, "expected a list of at most head_dim numbers");
      for (const auto& v : a) {
        if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) r.fail(k, "expected positive numbers");
        out.push_back(v.get<double>());
      }
      return out;
    };
    rope.shortFactor = factors("short_factor");
    rope.longFactor = factors("long_factor");
  }
  if (rope.type == "llama3" && !(rope.highFreqFactor > rope.lowFreqFactor))
    r.fail("high_freq_factor", "must exceed low_freq_factor for llama3 RoPE scaling");
  return rope;
}
}  // namespace

json traceHeaderToJson(const Trace& t, int version) {
  json doc;
  doc["version"] = version;
  doc["engine"] = t.engine;
  doc["mode"] = t.mode;
  const auto& m = t.model;
  doc["model"] = {{"fingerprint", m.fingerprint}, {"architecture", m.architecture},
                  {"directory", m.directory}, {"num_layers", m.numLayers}, {"num_heads", m.numHeads},
                  {"num_kv_heads", m.numKvHeads}, {"head_dim", m.headDim}, {"vocab_size", m.vocabSize},
                  {"max_positions", m.maxPositions}, {"stored_dtype", m.storedDtype},
                  {"compute_dtype", m.computeDtype}};
  if (m.valueHeadDim > 0 && m.valueHeadDim != m.headDim) doc["model"]["value_head_dim"] = m.valueHeadDim;
  if (m.rope) doc["model"]["rope_parameters"] = ropeToJson(*m.rope);
  if (m.latentHeads) doc["model"]["latent_records"] = "heads";  // absent: "latent"
  doc["requests"] = json::array();
  for (const auto& r : t.requests) {
    json p;
    to_json(p, r.policy);
    doc["requests"].push_back({{"id", r.id}, {"prompt_ids", r.promptIds}, {"prompt_text", r.promptText},
                               {"policy", p}, {"max_new_tokens", r.maxNewTokens}, {"eos_ids", r.eosIds},
                               {"generated", r.generated}, {"stop_reason", r.stopReason},
                               {"arrival_tick", r.arrivalTick}, {"batch_group", r.batchGroup}});
  }
  doc["events"] = json::array();
  for (const auto& e : t.events)
    doc["events"].push_back({{"tick", e.tick}, {"kind", e.kind}, {"detail", e.detail},
                             {"weights_version", e.weightsVersion}, {"tensor", e.tensor},
                             {"scale", e.scale}, {"seed", e.seed}});
  doc["faults"] = t.faults;
  if (!t.faultFirings.empty()) {  // absent: not recorded
    doc["fault_firings"] = json::array();
    for (const auto& f : t.faultFirings)
      doc["fault_firings"].push_back(
          f.fired ? json{{"fired", true}, {"request", f.request}, {"step", f.step}, {"layer", f.layer}}
                  : json{{"fired", false}, {"reason", f.reason}});
  }
  if (t.kvCache.quantized()) doc["kv_cache"] = kvCacheToJson(t.kvCache);
  if (t.isLayerSubset()) doc["recorded_layers"] = t.recordedLayers;  // absent: every layer
  if (!t.layerKinds.empty()) doc["layer_kinds"] = layerKindsToJson(t.layerKinds);
  return doc;
}

Trace traceHeaderFromJson(const json& doc, const std::string& file, int version) {
  if (!doc.is_object()) throw InputError(file, "kvtrace", "expected a JSON object");
  JsonFieldReader top(doc, file, "");
  Trace t;
  t.formatVersion = static_cast<int>(top.integer("version"));
  if (t.formatVersion != version)
    top.fail("version", "trace document version " + std::to_string(t.formatVersion) +
                            " does not match the file's kvtrace_version " + std::to_string(version));
  t.engine = top.string("engine", "unknown");
  t.mode = top.string("mode", "cached");
  if (t.mode != "cached" && t.mode != "uncached") top.fail("mode", "expected \"cached\" or \"uncached\"");
  JsonFieldReader m(top.child("model"), file, "model");
  t.model.fingerprint = m.string("fingerprint");
  t.model.architecture = m.string("architecture");
  t.model.directory = m.string("directory");
  // Sizes are bounded before anything is allocated from them (docs/limits.md).
  t.model.numLayers = m.integerIn("num_layers", 1, limits::kLayers);
  t.model.numHeads = m.has("num_heads") ? m.integerIn("num_heads", 0, limits::kHeads) : 0;
  t.model.numKvHeads = m.integerIn("num_kv_heads", 1, limits::kHeads);
  t.model.headDim = m.integerIn("head_dim", 1, limits::kHeadDim);
  t.model.valueHeadDim = m.has("value_head_dim") ? m.integerIn("value_head_dim", 1, limits::kHeadDim) : 0;
  t.model.vocabSize = m.integerIn("vocab_size", 1, limits::kVocab);
  t.model.maxPositions =
      m.has("max_positions") ? m.integerIn("max_positions", 0, limits::kPositions) : 0;
  t.model.storedDtype = m.string("stored_dtype");
  t.model.computeDtype = m.string("compute_dtype", "float32");
  t.model.rope = ropeFromJson(m);
  if (m.has("latent_records")) {
    const std::string records = m.string("latent_records");
    if (records != "latent" && records != "heads")
      m.fail("latent_records", "\"" + records + "\": expected \"latent\" (latent rows and roped key parts) or "
                               "\"heads\" (each head's decompressed key and value)");
    t.model.latentHeads = records == "heads";
  }
  if (t.model.numLayers <= 0 || t.model.numKvHeads <= 0 || t.model.headDim <= 0 || t.model.vocabSize <= 0)
    throw InputError(file, "model", "num_layers, num_kv_heads, head_dim and vocab_size must be positive");
  const json& reqs = top.child("requests");
  if (!reqs.is_array()) top.fail("requests", "expected an array");
  for (size_t i = 0; i < reqs.size(); ++i) {
    JsonFieldReader r(reqs[i], file, "requests[" + std::to_string(i) + "]");
    TraceRequest tr;
    tr.id = r.integer("id");
    tr.promptIds = r.ints("prompt_ids");
    tr.promptText = r.string("prompt_text");
    if (r.has("policy")) {
      try {
        from_json(reqs[i]["policy"], tr.policy);
      } catch (const InputError& e) {
        throw InputError(file, r.at("policy") + "." + e.field(), e.detail());
      } catch (const std::exception& e) {
        throw InputError(file, r.at("policy"), e.what());
      }
    }
    tr.maxNewTokens = r.integerOr("max_new_tokens", 0);
    tr.eosIds = r.ints("eos_ids", false);
    tr.generated = r.ints("generated");
    tr.stopReason = r.string("stop_reason", "unknown");
    tr.arrivalTick = r.integerOr("arrival_tick", 0);
    tr.batchGroup = r.integerOr("batch_group", -1);
    for (const char* field : {"prompt_ids", "generated", "eos_ids"})
      for (int64_t id : r.ints(field, false))
        if (id < 0 || id >= t.model.vocabSize)
          r.fail(field, "token id " + std::to_string(id) +
                            " is outside the vocabulary (model.vocab_size " +
                            std::to_string(t.model.vocabSize) + ")");
    t.requests.push_back(std::move(tr));
  }
  if (top.has("events")) {
    const json& ev = doc["events"];
    if (!ev.is_array()) top.fail("events", "expected an array");
    for (size_t i = 0; i < ev.size(); ++i) {
      JsonFieldReader e(ev[i], file, "events[" + std::to_string(i) + "]");
      TraceEvent te;
      te.tick = e.integerOr("tick", 0);
      te.kind = e.string("kind");
      te.detail = e.string("detail");
      te.weightsVersion = e.unsignedOr("weights_version", 0);
      te.tensor = e.string("tensor");
      if (e.has("scale")) {
        if (!ev[i]["scale"].is_number()) e.fail("scale", "expected a number");
        te.scale = ev[i]["scale"].get<double>();
      }
      // A seed is 64 bits: written unsigned, or signed as torch.manual_seed accepts.
      te.seed = e.has("seed") && e.json()["seed"].is_number_integer() &&
                        !e.json()["seed"].is_number_unsigned()
                    ? static_cast<uint64_t>(e.integer("seed"))
                    : e.unsignedOr("seed", 0);
      t.events.push_back(std::move(te));
    }
  }
  t.faults = top.strings("faults");
  if (top.has("fault_firings")) {
    const json& ff = top.child("fault_firings");
    if (!ff.is_array() || ff.size() != t.faults.size())
      top.fail("fault_firings", "expected an array with one entry per fault (" +
                                    std::to_string(t.faults.size()) + ")");
    for (size_t i = 0; i < ff.size(); ++i) {
      const JsonFieldReader e(ff[i], file, "fault_firings[" + std::to_string(i) + "]");
      if (!ff[i].is_object() || !e.has("fired") || !ff[i]["fired"].is_boolean())
        e.fail("fired", "expected true or false");
      FaultFiring f;
      f.fired = ff[i]["fired"].get<bool>();
      f.request = e.integerOr("request", -1);
      f.step = e.integerOr("step", -1);
      f.layer = e.integerOr("layer", -1);
      f.reason = e.string("reason");
      t.faultFirings.push_back(std::move(f));
    }
  }
  t.kvCache = kvCacheFromJson(doc, file, t.model.numLayers);
  t.recordedLayers = recordedLayersFromJson(top, t.model.numLayers);
  t.layerKinds = layerKindsFromJson(doc, file, t.model.numLayers);
  return t;
}

}  // namespace kvscope::detail
