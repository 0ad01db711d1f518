// Ministral 3 (`ministral3`, the text model of Mistral 3): the Mistral block (no biases, a
// sliding window on every layer when sliding_window is set) with YaRN RoPE (by default factor
// 16 over 16384 positions, theta 1e6, mscale = mscale_all_dim = 1 so cos and sin are
// unscaled) and Llama 4's attention temperature: the rotated queries times
// 1 + llama_4_scaling_beta * ln(1 + floor(p / original_max_position_embeddings)), both read
// from the RoPE entry. Absent keys take Ministral3Config's defaults (8 KV heads, eps 1e-5).
// transformers: models/ministral3/modeling_ministral3.py.
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/HfDecoderKit.hpp"

namespace kvscope {

namespace {

// Ministral3Config's rope_parameters when the file names none.
nlohmann::json defaultRope() {
  return {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 16.0},
          {"original_max_position_embeddings", 16384}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
          {"mscale_all_dim", 1.0}, {"mscale", 1.0}, {"llama_4_scaling_beta", 0.1}};
}

class Ministral3Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Ministral3; }
  std::string modelType() const override { return "ministral3"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    const bool named = r.has("rope_parameters") || r.has("rope_scaling");
    nlohmann::json withRope = r.doc();
    if (!named) withRope["rope_parameters"] = defaultRope();  // installed before any rope_theta
    const ConfigReader rr(withRope, r.file());
    readDecoderConfig(rr, c, DecoderDefaults{8, 0, 1e6});
    c.normEps = r.doubleOr("rms_norm_eps", 1e-5);
    const int64_t window = r.intOr("sliding_window", 0);
    if (window > 0) {
      c.slidingWindow = window;
      c.slidingLayers.assign(static_cast<size_t>(c.numLayers), true);
    }
    const char* key = withRope.contains("rope_parameters") && withRope["rope_parameters"].is_object()
                          ? "rope_parameters" : "rope_scaling";
    const nlohmann::json& rope = withRope[key];
    if (!rope.is_object() || !rope.contains("llama_4_scaling_beta") || !rope["llama_4_scaling_beta"].is_number())
      throw InputError(r.file(), std::string(key) + ".llama_4_scaling_beta",
                       "missing or not a number: Ministral 3 scales its queries by it (transformers "
                       "fails at the forward without it)");
    c.queryScaleBeta = rope["llama_4_scaling_beta"].get<double>();
    c.queryScaleContext = c.rope.originalMaxPositions;
    if (c.queryScaleContext <= 0)
      throw InputError(r.file(), std::string(key) + ".original_max_position_embeddings",
                       "required: Ministral 3's query scale divides positions by it");
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = hfDecoderWeightNames();
    return n;
  }

  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"Ministral3ForCausalLM"});
    c["model_type"] = "ministral3";
    c["head_dim"] = s.resolvedHeadDim();
    c["sliding_window"] = s.slidingWindow > 0 ? nlohmann::json(s.slidingWindow) : nlohmann::json(nullptr);
    nlohmann::json rope = defaultRope();
    rope["rope_theta"] = s.ropeTheta;
    c.erase("rope_theta");
    c.erase("rope_scaling");
    c[s.configStyle == ConfigStyle::V4 ? "rope_scaling" : "rope_parameters"] = rope;
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    return hfDecoderDemoTensors(s, false, false, false);
  }

  void adjustDemoSpec(CheckpointSpec& s) const override {
    s.attentionBias = false;
    s.useSlidingWindow = false;
    s.maxWindowLayers = 0;
    s.ropeTheta = 1e6;
  }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    validateHfDecoderDemoSpec(s);
    require(s.ropeType == "default", "rope_type", "ministral3's demo always writes Ministral 3's YaRN");
    require(!s.attentionBias, "attention_bias", "Ministral 3 has no attention biases");
    require(!s.useSlidingWindow, "use_sliding_window", "only Qwen2 and Qwen3 have this switch");
    require(s.maxWindowLayers == 0, "max_window_layers", "only Qwen2 and Qwen3 have this option");
  }
};

}  // namespace

const ModelFamily& ministral3Family() {
  static const Ministral3Family f;
  return f;
}

}  // namespace kvscope
