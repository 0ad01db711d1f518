#include "model/families/GatedDeltaNetKit.hpp"

#include "kvscope/Error.hpp"
#include "model/ConfigReader.hpp"
#include "model/families/HfDecoderKit.hpp"
#include "util/InputLimits.hpp"

namespace kvscope {

namespace {

// layer_types as transformers' remap_legacy_layer_types reads them; absent: every
// full_attention_interval-th layer full.
void readDeltaNetLayerTypes(const ConfigReader& r, ModelConfig& c, const char* family) {
  const int64_t L = c.numLayers;
  c.deltaNet.layers = layerTypeFlags(r, L, {"linear_attention", "conv", "mamba"}, {"full_attention", "attention"}, family);
  if (!c.deltaNet.layers.empty()) return;
  const int64_t interval = r.intOr("full_attention_interval", 4);
  r.checkSize("full_attention_interval", interval, limits::kLayers);
  c.deltaNet.layers.assign(static_cast<size_t>(L), false);
  for (int64_t i = 0; i < L; ++i) c.deltaNet.layers[static_cast<size_t>(i)] = (i + 1) % interval != 0;
}

}  // namespace

void readGatedDeltaNetConfig(const ConfigReader& r, ModelConfig& c, const char* family, int64_t kvHeads,
                             int64_t denseWidth) {
  DecoderDefaults defaults;
  defaults.intermediateSize = denseWidth;
  defaults.numKvHeads = kvHeads;
  defaults.headDim = 256;
  defaults.partialRotaryFactor = 0.25;
  readDecoderConfig(r, c, defaults);
  c.normEps = r.doubleOr("rms_norm_eps", 1e-6);
  c.recipe.norm = BlockRecipe::Norm::RmsNormPlusOne;
  c.qkvBias = c.outputProjBias = r.boolOr("attention_bias", false);
  c.qkNorm = true;
  c.attentionOutputGate = true;
  DeltaNetConfig& d = c.deltaNet;
  const auto size = [&](const char* key, int64_t fallback, int64_t limit) {
    const int64_t v = r.intOr(key, fallback);
    r.checkSize(key, v, limit);
    return v;
  };
  d.keyHeads = size("linear_num_key_heads", 16, limits::kHeads);
  d.valueHeads = size("linear_num_value_heads", 32, limits::kHeads);
  d.keyHeadDim = size("linear_key_head_dim", 128, limits::kHeadDim);
  d.valueHeadDim = size("linear_value_head_dim", 128, limits::kHeadDim);
  d.convKernel = size("linear_conv_kernel_dim", 4, 64);
  if (d.valueHeads % d.keyHeads != 0)
    throw InputError(r.file(), "linear_num_value_heads",
                     std::to_string(d.valueHeads) + " is not a multiple of linear_num_key_heads (" +
                         std::to_string(d.keyHeads) + "): each key head serves a whole group of value heads");
  readDeltaNetLayerTypes(r, c, family);
}

void addDeltaNetWeightNames(WeightNames& w, bool fused) {
  if (fused) {
    w.dnQkvz = "linear_attn.in_proj_qkvz.weight";
    w.dnBa = "linear_attn.in_proj_ba.weight";
  } else {
    w.dnQkv = "linear_attn.in_proj_qkv.weight";
    w.dnZ = "linear_attn.in_proj_z.weight";
    w.dnB = "linear_attn.in_proj_b.weight";
    w.dnA = "linear_attn.in_proj_a.weight";
  }
  w.dnConv = "linear_attn.conv1d.weight";
  w.dnALog = "linear_attn.A_log";
  w.dnDtBias = "linear_attn.dt_bias";
  w.dnNorm = "linear_attn.norm.weight";
  w.dnOut = "linear_attn.out_proj.weight";
}

DemoDeltaNet DemoDeltaNet::of(const CheckpointSpec& s) {
  return {s.linearKeyHeads > 0 ? s.linearKeyHeads : s.numKvHeads, s.linearValueHeads > 0 ? s.linearValueHeads : s.numHeads,
          s.linearHeadDim > 0 ? s.linearHeadDim : s.resolvedHeadDim()};
}

bool DemoDeltaNet::fullLayer(const CheckpointSpec& s, int64_t i) const {
  return s.fullAttentionInterval > 0 ? (i + 1) % s.fullAttentionInterval == 0 : i % 2 == 1;
}

void addDeltaNetDemoConfig(nlohmann::json& c, const CheckpointSpec& s) {
  const DemoDeltaNet d = DemoDeltaNet::of(s);
  c["head_dim"] = s.resolvedHeadDim();
  c["attention_bias"] = false;
  c["linear_num_key_heads"] = d.keyHeads;
  c["linear_num_value_heads"] = d.valueHeads;
  c["linear_key_head_dim"] = d.width;
  c["linear_value_head_dim"] = d.width;
  c["linear_conv_kernel_dim"] = 4;
  nlohmann::json types = nlohmann::json::array();
  for (int64_t i = 0; i < s.numLayers; ++i) types.push_back(d.fullLayer(s, i) ? "full_attention" : "linear_attention");
  c["layer_types"] = types;
}

std::vector<CheckpointWriter::TensorPlan> deltaNetDemoTensors(const CheckpointSpec& s, const WeightNames& n,
                                                              std::vector<CheckpointWriter::TensorPlan> dense) {
  using Init = CheckpointWriter::Init;
  const int64_t H = s.hiddenSize, D = s.resolvedHeadDim();
  const DemoDeltaNet d = DemoDeltaNet::of(s);
  const int64_t key = d.keyHeads * d.width, value = d.valueHeads * d.width, conv = 2 * key + value;
  const double bias = CheckpointWriter::kBiasFraction * s.initStd;
  std::vector<CheckpointWriter::TensorPlan> p;
  for (auto& t : dense) {
    bool dropped = false;
    for (int64_t i = 0; i < s.numLayers; ++i) {
      if (d.fullLayer(s, i)) {
        if (t.name == n.layer(i, n.q)) {
          p.push_back({t.name, {2 * s.numHeads * D, H}, Init::Normal, s.initStd});  // query | gate
          dropped = true;
        }
        continue;
      }
      for (const std::string* a : {&n.q, &n.k, &n.v, &n.o, &n.qNorm, &n.kNorm})
        dropped = dropped || t.name == n.layer(i, *a);
      if (t.name != n.layer(i, n.q)) continue;  // the Gated DeltaNet in the attention's place
      p.push_back({n.layer(i, n.dnDtBias), {d.valueHeads}, Init::Bias, bias});
      p.push_back({n.layer(i, n.dnALog), {d.valueHeads}, Init::Bias, bias});
      p.push_back({n.layer(i, n.dnConv), {conv, 1, 4}, Init::Normal, s.initStd});
      p.push_back({n.layer(i, n.dnNorm), {d.width}, Init::NormWeight, 0.0});
      p.push_back({n.layer(i, n.dnOut), {H, value}, Init::Normal, s.initStd});
      if (!n.dnQkvz.empty()) {
        p.push_back({n.layer(i, n.dnQkvz), {conv + value, H}, Init::Normal, s.initStd});
        p.push_back({n.layer(i, n.dnBa), {2 * d.valueHeads, H}, Init::Normal, s.initStd});
      } else {
        p.push_back({n.layer(i, n.dnQkv), {conv, H}, Init::Normal, s.initStd});
        p.push_back({n.layer(i, n.dnZ), {value, H}, Init::Normal, s.initStd});
        p.push_back({n.layer(i, n.dnB), {d.valueHeads, H}, Init::Normal, s.initStd});
        p.push_back({n.layer(i, n.dnA), {d.valueHeads, H}, Init::Normal, s.initStd});
      }
    }
    if (!dropped) p.push_back(t);
  }
  return p;
}

void adjustDeltaNetDemoSpec(CheckpointSpec& s) {
  s.attentionBias = false;
  s.useSlidingWindow = false;
  s.maxWindowLayers = 0;
  s.slidingWindow = 0;
}

void validateDeltaNetDemoSpec(const CheckpointSpec& s) {
  validateHfDecoderDemoSpec(s);
  if (s.attentionBias) throw UsageError("checkpoint spec: attention_bias: the Gated DeltaNet demos have no attention biases");
  if (s.slidingWindow != 0)
    throw UsageError("checkpoint spec: sliding_window: the Gated DeltaNet families have no sliding-window layers");
  const DemoDeltaNet d = DemoDeltaNet::of(s);
  if (d.keyHeads <= 0 || d.valueHeads % d.keyHeads != 0)
    throw UsageError("checkpoint spec: linear_num_value_heads: a multiple of linear_num_key_heads (each key head "
                     "serves a group of value heads)");
}

}  // namespace kvscope
