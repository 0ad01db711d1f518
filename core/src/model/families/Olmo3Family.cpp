// OLMo 3 (`olmo3`): the OLMo 2 block (no pre-norms, RMSNorm of each sublayer's output, q/k
// RMSNorm over the whole projection) with sliding-window layers per layer_types (by default
// every layer but each fourth) and a RoPE per layer type: rope_parameters keyed by
// full_attention / sliding_attention (transformers 5), or rope_theta + rope_scaling
// (transformers 4), which Olmo3Config puts on the full-attention layers only: the sliding ones
// keep the default base 500000, unscaled. Absent keys take Olmo3Config's defaults (theta
// 500000, window 4096, eps 1e-5). transformers: models/olmo3/modeling_olmo3.py.
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/HfDecoderKit.hpp"

namespace kvscope {

namespace {

constexpr double kOlmo3DefaultTheta = 500000.0;

class Olmo3Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Olmo3; }
  std::string modelType() const override { return "olmo3"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readDecoderConfig(r, c, DecoderDefaults{0, 0, kOlmo3DefaultTheta});
    c.normEps = r.doubleOr("rms_norm_eps", 1e-5);
    c.qkvBias = c.outputProjBias = r.boolOr("attention_bias", false);
    c.qkNorm = true;
    c.recipe.qkNormOverHeads = true;
    const int64_t window = r.intOr("sliding_window", 4096);
    if (!readLayerTypes(r, c, window > 0 ? window : 0)) {
      c.slidingWindow = window > 0 ? window : 0;
      for (int64_t i = 0; i < c.numLayers; ++i) c.slidingLayers[static_cast<size_t>(i)] = (i + 1) % 4 != 0;
    }
    // The sliding layers' RoPE: their rope_parameters entry, else the default base unscaled
    // (a top-level rope_theta and rope_scaling reach the full-attention layers only).
    RopeConfig local;
    local.theta = kOlmo3DefaultTheta;
    local.partialRotaryFactor = c.rope.partialRotaryFactor;
    if (auto keyed = readLayerTypeRope(r, "sliding_attention", local)) local = *keyed;
    if (!(local == c.rope)) c.slidingRope = local;
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = postNormDecoderWeightNames();
    return n;
  }

  // make-demo: the OLMo 2 tensors; layers sliding (window from --sliding-window, 4096 when
  // unset) but each fourth, one RoPE per layer type in the spec's style.
  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"Olmo3ForCausalLM"});
    c["model_type"] = "olmo3";
    c["attention_bias"] = false;
    c["sliding_window"] = s.slidingWindow > 0 ? s.slidingWindow : 4096;
    nlohmann::json types = nlohmann::json::array();
    for (int64_t i = 0; i < s.numLayers; ++i) types.push_back((i + 1) % 4 != 0 ? "sliding_attention" : "full_attention");
    c["layer_types"] = types;
    if (s.configStyle == ConfigStyle::V5) {
      nlohmann::json full = c["rope_parameters"];
      c["rope_parameters"] = {{"full_attention", full},
                              {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", s.ropeTheta}}}};
    }
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    return hfDecoderDemoTensors(s, weightNames(), false, false, true, true);
  }

  void adjustDemoSpec(CheckpointSpec& s) const override {
    s.attentionBias = false;
    s.headDim = 0;
    s.useSlidingWindow = false;
    s.maxWindowLayers = 0;
    s.ropeTheta = kOlmo3DefaultTheta;
  }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    validateHfDecoderDemoSpec(s);
    require(s.headDim == 0, "head_dim", "OLMo 3 derives head_dim from hidden_size / heads");
    require(!s.attentionBias, "attention_bias", "only Llama has the attention_bias option");
    require(!s.useSlidingWindow, "use_sliding_window", "OLMo 3's layers slide by layer_types");
    require(s.maxWindowLayers == 0, "max_window_layers", "OLMo 3's layers slide by layer_types");
  }
};

}  // namespace

const ModelFamily& olmo3Family() {
  static const Olmo3Family f;
  return f;
}

}  // namespace kvscope
