// GPT-OSS (`gpt_oss`): a pre-norm block whose attention has q/k/v/o biases, a learned sink
// logit per head in every softmax (self_attn.sinks), YaRN RoPE (factor 32 over 4096 positions,
// beta 32/1, no truncation, theta 150000 by default) and layers alternating sliding (even) and
// full (odd) per layer_types; every MLP is a mixture of experts: a router with a bias whose k
// largest logits are softmaxed, and stacked experts ([E, in, out] with biases) computing
// GPT-OSS's clamped GLU from one interleaved gate|up product (MoeConfig::Expert::ClampedGlu).
// Absent keys take GptOssConfig's defaults. transformers: models/gpt_oss/modeling_gpt_oss.py.
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/HfDecoderKit.hpp"
#include "util/InputLimits.hpp"

namespace kvscope {

namespace {

constexpr int64_t kGptOssDemoExperts = 4, kGptOssDemoTopK = 2, kGptOssDemoWindow = 128;

// GptOssConfig's rope_parameters when the file names none.
RopeConfig defaultYarn(double theta) {
  RopeConfig r;
  r.type = "yarn";
  r.theta = theta;
  r.factor = 32.0;
  r.betaFast = 32.0;
  r.betaSlow = 1.0;
  r.truncate = false;
  r.originalMaxPositions = 4096;
  return r;
}

nlohmann::json yarnJson(const RopeConfig& r) {
  return {{"rope_type", "yarn"}, {"rope_theta", r.theta}, {"factor", r.factor},
          {"beta_fast", r.betaFast}, {"beta_slow", r.betaSlow}, {"truncate", r.truncate},
          {"original_max_position_embeddings", r.originalMaxPositions}};
}

class GptOssFamily final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::GptOss; }
  std::string modelType() const override { return "gpt_oss"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readDecoderConfig(r, c, DecoderDefaults{8, 64, 150000.0});
    if (!r.has("rope_parameters") && !r.has("rope_scaling"))
      c.rope = defaultYarn(r.doubleOr("rope_theta", 150000.0));
    c.normEps = r.doubleOr("rms_norm_eps", 1e-5);
    c.qkvBias = c.outputProjBias = r.boolOr("attention_bias", true);
    c.attentionSinks = true;
    const int64_t window = r.intOr("sliding_window", 128);
    if (!readLayerTypes(r, c, window > 0 ? window : 0)) {
      c.slidingWindow = window > 0 ? window : 0;  // even layers slide
      for (int64_t i = 0; i < c.numLayers; ++i) c.slidingLayers[static_cast<size_t>(i)] = i % 2 == 0;
    }
    MoeConfig& m = c.moe;
    readExpertCounts(r, m, "num_local_experts", "num_experts", 128, 4);
    if (m.numExperts == 0)
      throw InputError(r.file(), r.has("num_local_experts") || !r.has("num_experts") ? "num_local_experts" : "num_experts",
                       "must be positive, found 0: every GPT-OSS MLP is a mixture of experts");
    m.intermediateSize = c.intermediateSize;  // each expert is intermediate_size wide
    m.routing = MoeConfig::Routing::TopKThenSoftmax;
    m.routerBias = true;
    m.expert = MoeConfig::Expert::ClampedGlu;
    m.gluAlpha = 1.702;
    m.gluLimit = 7.0;  // transformers' GptOssExperts fixes it (the config's swiglu_limit is 7 too)
    m.layers.assign(static_cast<size_t>(c.numLayers), true);
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = [] {
      WeightNames w = hfDecoderWeightNames();
      w.gate = w.up = w.down = w.gateBias = w.upBias = w.downBias = "";
      w.sinks = "self_attn.sinks";
      w.router = "mlp.router.weight";
      w.routerBias = "mlp.router.bias";
      w.stackedGateUp = "mlp.experts.gate_up_proj";
      w.stackedGateUpBias = "mlp.experts.gate_up_proj_bias";
      w.stackedDown = "mlp.experts.down_proj";
      w.stackedDownBias = "mlp.experts.down_proj_bias";
      return w;
    }();
    return n;
  }

  // make-demo: 4 experts, 2 per token, each intermediate_size wide; GPT-OSS's YaRN; layers
  // alternating sliding (window 128 unless --sliding-window says) and full.
  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"GptOssForCausalLM"});
    c["model_type"] = "gpt_oss";
    c["attention_bias"] = true;
    c["head_dim"] = s.resolvedHeadDim();
    c["num_local_experts"] = kGptOssDemoExperts;
    c["num_experts_per_tok"] = kGptOssDemoTopK;
    c["rms_norm_eps"] = s.normEps > 0 ? s.normEps : 1e-05;
    c["sliding_window"] = s.slidingWindow > 0 ? s.slidingWindow : kGptOssDemoWindow;
    nlohmann::json types = nlohmann::json::array();
    for (int64_t i = 0; i < s.numLayers; ++i) types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    c["layer_types"] = types;
    const nlohmann::json yarn = yarnJson(defaultYarn(s.ropeTheta));
    if (s.configStyle == ConfigStyle::V4) {
      c["rope_theta"] = s.ropeTheta;
      nlohmann::json scaling = yarn;
      scaling.erase("rope_theta");
      c["rope_scaling"] = scaling;
    } else {
      c.erase("rope_theta");
      c.erase("rope_scaling");
      c["rope_parameters"] = yarn;
    }
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    using Init = CheckpointWriter::Init;
    const WeightNames& n = weightNames();
    const int64_t H = s.hiddenSize, I = s.intermediateSize, E = kGptOssDemoExperts;
    const double bias = CheckpointWriter::kBiasFraction * s.initStd;
    std::vector<CheckpointWriter::TensorPlan> p;
    for (auto& t : hfDecoderDemoTensors(s, n, true, true, false, false)) {
      p.push_back(t);
      for (int64_t i = 0; i < s.numLayers; ++i) {
        if (t.name != n.layer(i, n.oBias)) continue;  // after the attention's tensors
        p.push_back({n.layer(i, n.sinks), {s.numHeads}, Init::Normal, s.initStd});
        p.push_back({n.layer(i, n.router), {E, H}, Init::Normal, s.initStd});
        p.push_back({n.layer(i, n.routerBias), {E}, Init::Bias, bias});
        p.push_back({n.layer(i, n.stackedGateUp), {E, H, 2 * I}, Init::Normal, s.initStd});
        p.push_back({n.layer(i, n.stackedGateUpBias), {E, 2 * I}, Init::Bias, bias});
        p.push_back({n.layer(i, n.stackedDown), {E, I, H}, Init::Normal, s.initStd});
        p.push_back({n.layer(i, n.stackedDownBias), {E, H}, Init::Bias, bias});
      }
    }
    return p;
  }

  void adjustDemoSpec(CheckpointSpec& s) const override {
    s.attentionBias = true;
    s.useSlidingWindow = false;
    s.maxWindowLayers = 0;
    s.ropeTheta = 150000.0;
  }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    validateHfDecoderDemoSpec(s);
    require(s.ropeType == "default", "rope_type", "gpt_oss's demo always writes GPT-OSS's YaRN");
    require(!s.useSlidingWindow, "use_sliding_window", "gpt_oss's layers slide by layer_types");
    require(s.maxWindowLayers == 0, "max_window_layers", "gpt_oss's layers slide by layer_types");
  }
};

}  // namespace

const ModelFamily& gptOssFamily() {
  static const GptOssFamily f;
  return f;
}

}  // namespace kvscope
