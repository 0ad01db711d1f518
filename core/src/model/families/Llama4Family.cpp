// Llama 4 text (`llama4_text`; a `llama4` checkpoint's text_config): the Llama block with
// - RoPE in complex form (feature pairs (2i, 2i + 1)), on the layers no_rope_layers marks 1
//   (empty or absent: every no_rope_layer_interval-th layer, default 4, is NoPE);
// - after RoPE, a weightless RMS ("L2") norm of q and k per head on those layers (use_qk_norm);
// - the NoPE layers' queries scaled by 1 + attn_scale ln(1 + floor((p + 1) / floor_scale))
//   (attn_temperature_tuning);
// - layers whose layer_types entry is "chunked_attention" (absent: the RoPE layers) attend
//   only within their chunk of attention_chunk_size positions;
// - on moe_layers (absent: every interleave_moe_layer_step-th layer, from step - 1) a mixture
//   of num_local_experts stacked experts: the num_experts_per_tok largest router logits, each
//   expert's input scaled by the sigmoid of its logit, plus a shared expert every token takes;
//   the other layers a dense MLP of intermediate_size_mlp.
// Absent keys take Llama4TextConfig's defaults. transformers: models/llama4/modeling_llama4.py.
#include <algorithm>

#include "kvscope/Error.hpp"
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/HfDecoderKit.hpp"
#include "util/InputLimits.hpp"

namespace kvscope {

namespace {

constexpr int64_t kLlama4DemoExperts = 4, kLlama4DemoTopK = 1, kLlama4DemoChunk = 8192;

// One 0/1 per layer under `key`; empty (or absent) gives `fallback(i)`, as Llama4TextConfig's
// `x if x else default` does.
template <class Fallback>
std::vector<bool> layerFlags(const ConfigReader& r, const char* key, int64_t layers, Fallback fallback) {
  std::vector<bool> out(static_cast<size_t>(layers));
  const bool given = r.has(key) && r.doc()[key].is_array() && !r.doc()[key].empty();
  if (r.has(key) && !r.doc()[key].is_array()) throw InputError(r.file(), key, "expected a list of 0 or 1 per layer");
  if (given && static_cast<int64_t>(r.doc()[key].size()) != layers)
    throw InputError(r.file(), key, "expected one 0 or 1 per layer (" + std::to_string(layers) + "), found " +
                                        std::to_string(r.doc()[key].size()));
  for (int64_t i = 0; i < layers; ++i) {
    if (!given) {
      out[static_cast<size_t>(i)] = fallback(i);
      continue;
    }
    const int64_t v = r.asInt(r.doc()[key][static_cast<size_t>(i)], key);
    if (v != 0 && v != 1) throw InputError(r.file(), key, "expected 0 or 1, found " + std::to_string(v));
    out[static_cast<size_t>(i)] = v == 1;
  }
  return out;
}

class Llama4Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Llama4; }
  std::string modelType() const override { return "llama4_text"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readDecoderConfig(r, c, DecoderDefaults{8, 128, 500000.0});
    c.normEps = r.doubleOr("rms_norm_eps", 1e-5);
    c.recipe.ropeInterleaved = true;  // apply_rotary_emb: view_as_complex over (2i, 2i + 1)
    c.qkvBias = c.outputProjBias = r.boolOr("attention_bias", false);
    const int64_t L = c.numLayers;
    const int64_t interval = r.intOr("no_rope_layer_interval", 4);
    r.checkSize("no_rope_layer_interval", interval, limits::kLayers);  // beyond L: no NoPE layer
    const auto byInterval = [&](int64_t i) { return (i + 1) % interval != 0; };
    c.ropeLayers = layerFlags(r, "no_rope_layers", L, byInterval);
    for (int64_t i = 0; i < L; ++i) c.intervalRopeLayers.push_back(byInterval(i));
    c.qkL2Norm = r.boolOr("use_qk_norm", true);
    if (r.boolOr("attn_temperature_tuning", true)) {
      c.queryScaleBeta = positiveNumber(r, "attn_scale", 0.1);
      c.queryScaleContext = r.intOr("floor_scale", 8192);
      r.checkSize("floor_scale", c.queryScaleContext, limits::kPositions);
      c.queryScaleOffset = 1;
      c.queryScaleNopeOnly = true;
    }
    readChunks(r, c);
    readMoe(r, c);
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = [] {
      WeightNames w = hfDecoderWeightNames();
      w.gate = "feed_forward.gate_proj.weight";
      w.up = "feed_forward.up_proj.weight";
      w.down = "feed_forward.down_proj.weight";
      w.gateBias = w.upBias = w.downBias = "";
      w.router = "feed_forward.router.weight";
      w.stackedGateUp = "feed_forward.experts.gate_up_proj";
      w.stackedDown = "feed_forward.experts.down_proj";
      w.sharedGate = "feed_forward.shared_expert.gate_proj.weight";
      w.sharedUp = "feed_forward.shared_expert.up_proj.weight";
      w.sharedDown = "feed_forward.shared_expert.down_proj.weight";
      return w;
    }();
    return n;
  }

  // make-demo: Maverick's layout at the spec's size: every fourth layer NoPE and full, the
  // others chunked (--sliding-window sets the chunk, default 8192), a mixture of 4 experts
  // (top 1) beside a shared expert on every second layer, each intermediate_size wide.
  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"Llama4ForCausalLM"});
    c["model_type"] = "llama4_text";
    c["head_dim"] = s.resolvedHeadDim();
    c["attention_bias"] = false;
    c["rms_norm_eps"] = s.normEps > 0 ? s.normEps : 1e-05;
    c["intermediate_size_mlp"] = s.intermediateSize;
    c["num_local_experts"] = kLlama4DemoExperts;
    c["num_experts_per_tok"] = kLlama4DemoTopK;
    c["interleave_moe_layer_step"] = 2;
    c["use_qk_norm"] = true;
    c["attn_temperature_tuning"] = true;
    c["floor_scale"] = 8192;
    c["attn_scale"] = 0.1;
    c["attention_chunk_size"] = s.slidingWindow > 0 ? s.slidingWindow : kLlama4DemoChunk;
    nlohmann::json rope = nlohmann::json::array(), types = nlohmann::json::array(),
                   moe = nlohmann::json::array();
    for (int64_t i = 0; i < s.numLayers; ++i) {
      const bool rotary = (i + 1) % 4 != 0;
      rope.push_back(rotary ? 1 : 0);
      types.push_back(rotary ? "chunked_attention" : "full_attention");
      if (i % 2 == 1) moe.push_back(i);
    }
    c["no_rope_layers"] = rope;
    c["layer_types"] = types;
    c["moe_layers"] = moe;
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    using Init = CheckpointWriter::Init;
    const WeightNames& n = weightNames();
    const int64_t H = s.hiddenSize, I = s.intermediateSize, E = kLlama4DemoExperts;
    std::vector<CheckpointWriter::TensorPlan> p;
    for (auto& t : hfDecoderDemoTensors(s, n, false, false, false, false)) {
      bool replaced = false;
      for (int64_t i = 1; i < s.numLayers; i += 2) {  // the MoE layers: no dense MLP
        if (t.name == n.layer(i, n.gate)) {
          p.push_back({n.layer(i, n.stackedDown), {E, I, H}, Init::Normal, s.initStd});
          p.push_back({n.layer(i, n.stackedGateUp), {E, H, 2 * I}, Init::Normal, s.initStd});
          p.push_back({n.layer(i, n.router), {E, H}, Init::Normal, s.initStd});
          p.push_back({n.layer(i, n.sharedDown), {H, I}, Init::Normal, s.initStd});
          p.push_back({n.layer(i, n.sharedGate), {I, H}, Init::Normal, s.initStd});
          p.push_back({n.layer(i, n.sharedUp), {I, H}, Init::Normal, s.initStd});
        }
        replaced = replaced || t.name == n.layer(i, n.gate) || t.name == n.layer(i, n.up) ||
                   t.name == n.layer(i, n.down);
      }
      if (!replaced) p.push_back(t);
    }
    return p;
  }

  void adjustDemoSpec(CheckpointSpec& s) const override {
    s.attentionBias = false;
    s.useSlidingWindow = false;
    s.maxWindowLayers = 0;
  }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    validateHfDecoderDemoSpec(s);
    require(!s.attentionBias, "attention_bias", "the Llama 4 demo has no attention biases");
    require(!s.useSlidingWindow, "use_sliding_window", "Llama 4's layers are chunked by layer_types");
    require(s.maxWindowLayers == 0, "max_window_layers", "Llama 4's layers are chunked by layer_types");
  }

 private:
  // layer_types ("chunked_attention" / "full_attention"; absent: the RoPE layers are chunked)
  // and attention_chunk_size (null: no layer may be chunked).
  static void readChunks(const ConfigReader& r, ModelConfig& c) {
    const int64_t L = c.numLayers;
    c.chunkedLayers = layerTypeFlags(r, L, {"chunked_attention"}, {"full_attention"}, "Llama 4");
    if (c.chunkedLayers.empty())  // absent: the RoPE layers are chunked
      for (int64_t i = 0; i < L; ++i) c.chunkedLayers.push_back(c.ropeOn(i));
    const bool anyChunked = std::find(c.chunkedLayers.begin(), c.chunkedLayers.end(), true) != c.chunkedLayers.end();
    const bool keyGiven = r.doc().contains("attention_chunk_size");
    if (keyGiven && r.doc()["attention_chunk_size"].is_null()) {
      if (anyChunked)
        throw InputError(r.file(), "attention_chunk_size",
                         "null, but layer_types names chunked_attention layers (transformers refuses such a "
                         "config too: a chunked layer needs its chunk size)");
      return;
    }
    c.attentionChunk = r.intOr("attention_chunk_size", 8192);
    r.checkSize("attention_chunk_size", c.attentionChunk, limits::kPositions);
  }

  static void readMoe(const ConfigReader& r, ModelConfig& c) {
    MoeConfig& m = c.moe;
    const int64_t L = c.numLayers;
    readExpertCounts(r, m, "num_local_experts", "num_experts", 16, 1);
    m.intermediateSize = c.intermediateSize;  // intermediate_size: each expert's width
    m.sharedIntermediateSize = c.intermediateSize;
    c.intermediateSize = r.intOr("intermediate_size_mlp", 16384);  // the dense layers'
    r.checkSize("intermediate_size_mlp", c.intermediateSize, limits::kIntermediateSize);
    m.routing = MoeConfig::Routing::TopKThenSigmoid;
    m.expert = MoeConfig::Expert::StackedGated;
    m.weightInputs = true;
    m.layers.assign(static_cast<size_t>(L), false);
    if (r.has("moe_layers")) {
      const auto& list = r.doc()["moe_layers"];
      if (!list.is_array()) throw InputError(r.file(), "moe_layers", "expected a list of layer indices");
      for (const auto& e : list) {
        const int64_t i = r.asInt(e, "moe_layers");
        if (i < 0 || i >= L)
          throw InputError(r.file(), "moe_layers", std::to_string(i) + " is not a layer (0.." + std::to_string(L - 1) + ")");
        m.layers[static_cast<size_t>(i)] = true;
      }
    } else {
      const int64_t step = r.intOr("interleave_moe_layer_step", 1);
      r.checkSize("interleave_moe_layer_step", step, limits::kLayers);  // beyond L: no MoE layer
      for (int64_t i = step - 1; i < L; i += step) m.layers[static_cast<size_t>(i)] = true;
    }
    if (m.numExperts == 0) m.layers.assign(static_cast<size_t>(L), false);
  }
};

}  // namespace

const ModelFamily& llama4Family() {
  static const Llama4Family f;
  return f;
}

}  // namespace kvscope
