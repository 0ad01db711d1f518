#include "model/families/HfDecoderKit.hpp"

#include <algorithm>
#include <cmath>

#include "kvscope/Error.hpp"
#include "model/ConfigReader.hpp"
#include "util/InputLimits.hpp"

namespace kvscope {

using nlohmann::json;

namespace {

// rope_scaling (v4) / rope_parameters (v5) entries beyond the type.
void addRopeScaling(json& o, const CheckpointSpec& s) {
  if (s.ropeType == "default") return;
  o["factor"] = s.ropeFactor;
  if (s.ropeType == "llama3") {
    o["low_freq_factor"] = s.ropeLowFreqFactor;
    o["high_freq_factor"] = s.ropeHighFreqFactor;
  }
  if (s.ropeOriginalMaxPositions > 0 && (s.ropeType == "llama3" || s.ropeType == "dynamic"))
    o["original_max_position_embeddings"] = s.ropeOriginalMaxPositions;
}

void addRope(json& c, const CheckpointSpec& s) {
  if (s.configStyle == ConfigStyle::V4) {
    c["rope_theta"] = s.ropeTheta;
    if (s.ropeType == "default") {
      c["rope_scaling"] = nullptr;
    } else {
      json scaling = json::object();
      scaling["rope_type"] = s.ropeType;
      addRopeScaling(scaling, s);
      c["rope_scaling"] = scaling;
    }
  } else {
    json params = json::object();
    params["rope_theta"] = s.ropeTheta;
    params["rope_type"] = s.ropeType;
    addRopeScaling(params, s);
    c["rope_parameters"] = params;
  }
}

}  // namespace

void readDecoderConfig(const ConfigReader& r, ModelConfig& c, const DecoderDefaults& defaults) {
  const std::string& file = r.file();
  c.hiddenSize = r.requireSize("hidden_size", limits::kHiddenSize);
  c.numHeads = r.requireSize("num_attention_heads", limits::kHeads);
  c.numLayers = r.requireSize("num_hidden_layers", limits::kLayers);
  c.intermediateSize = defaults.intermediateSize > 0 && !r.has("intermediate_size")
                           ? defaults.intermediateSize
                           : r.requireSize("intermediate_size", limits::kIntermediateSize);
  c.maxPositions = r.requireSize("max_position_embeddings", limits::kPositions);
  c.numKvHeads = r.intOr("num_key_value_heads", defaults.numKvHeads > 0 ? defaults.numKvHeads : c.numHeads);
  r.checkSize("num_key_value_heads", c.numKvHeads, limits::kHeads);
  if (c.numHeads % c.numKvHeads != 0)
    throw InputError(file, "num_key_value_heads",
                     std::to_string(c.numKvHeads) + " does not divide num_attention_heads " +
                         std::to_string(c.numHeads));
  c.headDim = r.intOr("head_dim", defaults.headDim);
  if (c.headDim == 0) {
    if (c.hiddenSize % c.numHeads != 0)
      throw InputError(file, "head_dim", "absent and hidden_size is not divisible by heads");
    c.headDim = c.hiddenSize / c.numHeads;
  }
  r.checkSize("head_dim", c.headDim, limits::kHeadDim);
  c.normEps = r.doubleOr("rms_norm_eps", 1e-6);
  c.activation = r.activation("hidden_act", "silu");
  c.rope = readRope(r, defaults.ropeTheta, defaults.originalMaxPositions, defaults.partialRotaryFactor);
  const double partial = c.rope.partialRotaryFactor;
  if (!(partial > 0) || partial > 1)
    throw InputError(file, "partial_rotary_factor", "must be in (0, 1], found " + std::to_string(partial));
  const auto rotary = static_cast<int64_t>(static_cast<double>(c.headDim) * partial);
  if (rotary < 2 || rotary % 2 != 0)
    throw InputError(file, "partial_rotary_factor",
                     "rotates " + std::to_string(rotary) + " of head_dim " + std::to_string(c.headDim) +
                         " features; RoPE needs an even, positive number");
  checkRopeForRotaryDim(r, c.rope, rotary, r.has("rope_parameters") ? "rope_parameters" : "rope_scaling");
  c.mlpBias = r.boolOr("mlp_bias", false);
  c.tieWordEmbeddings = r.boolOr("tie_word_embeddings", false);
  c.recipe = BlockRecipe{};  // RMSNorm, RoPE, [out, in] Linear, separate q/k/v, gated MLP
  c.slidingLayers.assign(static_cast<size_t>(c.numLayers), false);
}

bool readLayerTypes(const ConfigReader& r, ModelConfig& c, int64_t window) {
  if (!r.has("layer_types")) return false;
  const auto& lt = r.doc()["layer_types"];
  if (!lt.is_array() || static_cast<int64_t>(lt.size()) != c.numLayers)
    throw InputError(r.file(), "layer_types", "expected one entry per layer");
  c.slidingWindow = window;
  for (size_t i = 0; i < lt.size(); ++i) {
    if (!lt[i].is_string()) throw InputError(r.file(), "layer_types", "expected strings");
    c.slidingLayers[i] = lt[i].get<std::string>() == "sliding_attention";
  }
  return true;
}

std::vector<bool> layerTypeFlags(const ConfigReader& r, int64_t layers, const std::vector<std::string>& marked,
                                 const std::vector<std::string>& others, const std::string& family) {
  if (!r.has("layer_types")) return {};
  const auto& lt = r.doc()["layer_types"];
  if (!lt.is_array() || static_cast<int64_t>(lt.size()) != layers)
    throw InputError(r.file(), "layer_types", "expected one entry per layer (" + std::to_string(layers) + ")");
  std::vector<bool> out;
  const auto named = [](const std::vector<std::string>& names, const std::string& t) {
    return std::find(names.begin(), names.end(), t) != names.end();
  };
  for (size_t i = 0; i < lt.size(); ++i) {
    const std::string type = lt[i].is_string() ? lt[i].get<std::string>() : "";
    if (!named(marked, type) && !named(others, type))
      throw InputError(r.file(), "layer_types[" + std::to_string(i) + "]",
                       "expected \"" + marked.front() + "\" or \"" + others.front() + "\" (" + family +
                           " has no other layer type)");
    out.push_back(named(marked, type));
  }
  return out;
}

json hfDecoderDemoConfig(const CheckpointSpec& s) {
  json c = json::object();
  c["attention_dropout"] = 0.0;
  c["hidden_act"] = "silu";
  c["hidden_size"] = s.hiddenSize;
  c["intermediate_size"] = s.intermediateSize;
  c["max_position_embeddings"] = s.maxPositions;
  c["num_attention_heads"] = s.numHeads;
  c["num_hidden_layers"] = s.numLayers;
  c["num_key_value_heads"] = s.numKvHeads;
  c["rms_norm_eps"] = s.normEps > 0 ? s.normEps : 1e-06;
  addRope(c, s);
  return c;
}

std::vector<CheckpointWriter::TensorPlan> hfDecoderDemoTensors(const CheckpointSpec& s, bool qkvBias,
                                                               bool oBias, bool qkNorm) {
  return hfDecoderDemoTensors(s, hfDecoderWeightNames(), qkvBias, oBias, qkNorm, false);
}

void readQwenSparseMoe(const ConfigReader& r, ModelConfig& c, int64_t experts, int64_t topK, int64_t width,
                       bool normTopK) {
  MoeConfig& m = c.moe;
  // transformers 5 writes num_local_experts (its attribute_map name); the Hub's configs
  // and transformers 4 name it num_experts.
  readExpertCounts(r, m, "num_experts", "num_local_experts", experts, topK);
  m.layers.assign(static_cast<size_t>(c.numLayers), false);
  if (m.numExperts == 0) return;  // every layer dense
  m.intermediateSize = r.intOr("moe_intermediate_size", width);
  r.checkSize("moe_intermediate_size", m.intermediateSize, limits::kIntermediateSize);
  m.normTopK = r.boolOr("norm_topk_prob", normTopK);
  const int64_t step = r.intOr("decoder_sparse_step", 1);
  if (step < 1) throw InputError(r.file(), "decoder_sparse_step", "must be >= 1");
  for (int64_t i = 0; i < c.numLayers; ++i) m.layers[static_cast<size_t>(i)] = (i + 1) % step == 0;
  for (int64_t i : r.intList("mlp_only_layers")) {
    if (i < 0 || i >= c.numLayers)
      throw InputError(r.file(), "mlp_only_layers",
                       "layer " + std::to_string(i) + " is not in [0, " + std::to_string(c.numLayers) + ")");
    m.layers[static_cast<size_t>(i)] = false;
  }
}

void readQwenSharedExpert(const ConfigReader& r, ModelConfig& c, int64_t width) {
  c.moe.sharedIntermediateSize = r.intOr("shared_expert_intermediate_size", width);
  r.checkSize("shared_expert_intermediate_size", c.moe.sharedIntermediateSize, limits::kIntermediateSize);
  c.moe.sharedExpertGate = true;
}

void addQwenSharedExpertMoeNames(WeightNames& w) {
  w.router = "mlp.gate.weight";
  w.expertPrefix = "mlp.experts.";
  w.expertGate = "gate_proj.weight";
  w.expertUp = "up_proj.weight";
  w.expertDown = "down_proj.weight";
  w.sharedGate = "mlp.shared_expert.gate_proj.weight";
  w.sharedUp = "mlp.shared_expert.up_proj.weight";
  w.sharedDown = "mlp.shared_expert.down_proj.weight";
  w.sharedExpertGate = "mlp.shared_expert_gate.weight";
}

std::vector<CheckpointWriter::TensorPlan> withQwenSharedExperts(const CheckpointSpec& s, const WeightNames& n,
                                                                std::vector<CheckpointWriter::TensorPlan> moe,
                                                                int64_t experts) {
  using Init = CheckpointWriter::Init;
  std::vector<CheckpointWriter::TensorPlan> out;
  const int64_t H = s.hiddenSize, I = s.intermediateSize;
  for (auto& t : moe) {
    out.push_back(t);
    for (int64_t i = 0; i < s.numLayers; ++i)
      if (t.name == n.expert(i, experts - 1, n.expertDown)) {
        out.push_back({n.layer(i, n.sharedGate), {I, H}, Init::Normal, s.initStd});
        out.push_back({n.layer(i, n.sharedUp), {I, H}, Init::Normal, s.initStd});
        out.push_back({n.layer(i, n.sharedDown), {H, I}, Init::Normal, s.initStd});
        out.push_back({n.layer(i, n.sharedExpertGate), {1, H}, Init::Normal, s.initStd});
      }
  }
  return out;
}

double positiveNumber(const ConfigReader& r, const char* name, double fallback) {
  const double v = r.doubleOr(name, fallback);
  if (!(v > 0) || !std::isfinite(v))
    throw InputError(r.file(), name, "must be a positive number, found " + std::to_string(v));
  return v;
}

std::vector<CheckpointWriter::TensorPlan> hfDecoderDemoTensors(const CheckpointSpec& s,
                                                               const WeightNames& n, bool qkvBias,
                                                               bool oBias, bool qkNorm,
                                                               bool qkNormOverHeads) {
  using Init = CheckpointWriter::Init;
  const int64_t H = s.hiddenSize, I = s.intermediateSize, D = s.resolvedHeadDim();
  const int64_t q = s.numHeads * D, kv = s.numKvHeads * D;
  const double bias = CheckpointWriter::kBiasFraction * s.initStd;
  std::vector<CheckpointWriter::TensorPlan> p;
  p.push_back({n.embed, {s.vocabSize, H}, Init::Normal, s.initStd});
  for (int64_t i = 0; i < s.numLayers; ++i) {
    const auto linear = [&](const std::string& w, const std::string& b, int64_t out, int64_t in,
                            bool withBias) {
      if (w.empty()) return;  // the family has no such tensor (GPT-OSS: no dense MLP)
      p.push_back({n.layer(i, w), {out, in}, Init::Normal, s.initStd});  // [out, in]
      if (withBias) p.push_back({n.layer(i, b), {out}, Init::Bias, bias});
    };
    linear(n.q, n.qBias, q, H, qkvBias);
    linear(n.k, n.kBias, kv, H, qkvBias);
    linear(n.v, n.vBias, kv, H, qkvBias);
    linear(n.o, n.oBias, H, q, oBias);
    if (qkNorm) {  // q/k norm per head, or over the whole projection
      p.push_back({n.layer(i, n.qNorm), {qkNormOverHeads ? q : D}, Init::NormWeight, 0.0});
      p.push_back({n.layer(i, n.kNorm), {qkNormOverHeads ? kv : D}, Init::NormWeight, 0.0});
    }
    linear(n.gate, n.gateBias, I, H, false);
    linear(n.up, n.upBias, I, H, false);
    linear(n.gateUp, "", 2 * I, H, false);  // a fused gate|up (GLM-4)
    linear(n.down, n.downBias, H, I, false);
    for (const std::string* norm : {&n.attnNorm, &n.mlpNorm, &n.postAttnNorm, &n.postMlpNorm})
      if (!norm->empty()) p.push_back({n.layer(i, *norm), {H}, Init::NormWeight, 0.0});
  }
  p.push_back({n.finalNorm, {H}, Init::NormWeight, 0.0});
  if (!s.tieWordEmbeddings) p.push_back({n.lmHead, {s.vocabSize, H}, Init::Normal, s.initStd});
  return p;
}

int64_t demoExpertWidth(const CheckpointSpec& s) { return std::max<int64_t>(2, s.intermediateSize / 2); }

std::vector<CheckpointWriter::TensorPlan> moeDemoTensors(const CheckpointSpec& s, const WeightNames& n,
                                                         std::vector<CheckpointWriter::TensorPlan> dense,
                                                         int64_t experts, int64_t expertWidth,
                                                         const std::vector<int64_t>& denseLayers) {
  using Init = CheckpointWriter::Init;
  const int64_t H = s.hiddenSize, Im = expertWidth;
  auto isDense = [&](int64_t i) { return std::find(denseLayers.begin(), denseLayers.end(), i) != denseLayers.end(); };
  std::vector<CheckpointWriter::TensorPlan> p;
  for (auto& t : dense) {
    bool mlp = false;
    for (int64_t i = 0; i < s.numLayers; ++i) {
      if (isDense(i)) continue;
      if (t.name == n.layer(i, n.gate)) {  // the router and the experts stand where the MLP did
        p.push_back({n.layer(i, n.router), {experts, H}, Init::Normal, s.initStd});
        for (int64_t e = 0; e < experts; ++e) {
          p.push_back({n.expert(i, e, n.expertGate), {Im, H}, Init::Normal, s.initStd});
          p.push_back({n.expert(i, e, n.expertUp), {Im, H}, Init::Normal, s.initStd});
          p.push_back({n.expert(i, e, n.expertDown), {H, Im}, Init::Normal, s.initStd});
        }
      }
      mlp = mlp || t.name == n.layer(i, n.gate) || t.name == n.layer(i, n.up) || t.name == n.layer(i, n.down);
    }
    if (!mlp) p.push_back(t);
  }
  return p;
}

void readExpertCounts(const ConfigReader& r, MoeConfig& m, const char* primary, const char* alias,
                      int64_t defaultExperts, int64_t defaultTopK) {
  const char* key = r.has(primary) || !r.has(alias) ? primary : alias;
  m.numExperts = r.intOr(key, defaultExperts);
  if (m.numExperts < 0 || m.numExperts > limits::kExperts)
    throw InputError(r.file(), key, "must be in [0, " + std::to_string(limits::kExperts) + "]");
  if (m.numExperts == 0) return;
  m.topK = r.intOr("num_experts_per_tok", defaultTopK);
  if (m.topK < 1 || m.topK > m.numExperts)
    throw InputError(r.file(), "num_experts_per_tok",
                     std::to_string(m.topK) + " is not in [1, " + key + " = " + std::to_string(m.numExperts) + "]");
}

void validateHfDecoderDemoSpec(const CheckpointSpec& s) {
  if (s.resolvedHeadDim() % 2 != 0)
    throw UsageError("checkpoint spec: head_dim: RoPE needs an even head_dim");
}

WeightNames hfDecoderWeightNames() {
  WeightNames n;
  n.embed = "model.embed_tokens.weight";
  n.finalNorm = "model.norm.weight";
  n.lmHead = "lm_head.weight";
  n.layerPrefix = "model.layers.";
  n.attnNorm = "input_layernorm.weight";
  n.mlpNorm = "post_attention_layernorm.weight";
  n.q = "self_attn.q_proj.weight", n.qBias = "self_attn.q_proj.bias";
  n.k = "self_attn.k_proj.weight", n.kBias = "self_attn.k_proj.bias";
  n.v = "self_attn.v_proj.weight", n.vBias = "self_attn.v_proj.bias";
  n.o = "self_attn.o_proj.weight", n.oBias = "self_attn.o_proj.bias";
  n.qNorm = "self_attn.q_norm.weight", n.kNorm = "self_attn.k_norm.weight";
  n.gate = "mlp.gate_proj.weight", n.gateBias = "mlp.gate_proj.bias";
  n.up = "mlp.up_proj.weight", n.upBias = "mlp.up_proj.bias";
  n.down = "mlp.down_proj.weight", n.downBias = "mlp.down_proj.bias";
  return n;
}

WeightNames postNormDecoderWeightNames() {
  WeightNames w = hfDecoderWeightNames();
  w.attnNorm = w.mlpNorm = "";
  w.postAttnNorm = "post_attention_layernorm.weight";
  w.postMlpNorm = "post_feedforward_layernorm.weight";
  return w;
}

}  // namespace kvscope
