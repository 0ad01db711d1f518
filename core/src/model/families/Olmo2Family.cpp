// OLMo 2 (`olmo2`): the Llama block without pre-norms; each sublayer's output is RMS-normed
// before the residual add (post_attention_layernorm, post_feedforward_layernorm), and queries
// and keys are RMS-normed over the whole projection (weights [heads * head_dim]) before the
// heads are split and rotated. transformers: models/olmo2/modeling_olmo2.py.
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/HfDecoderKit.hpp"

namespace kvscope {

namespace {

class Olmo2Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Olmo2; }
  std::string modelType() const override { return "olmo2"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readDecoderConfig(r, c);
    c.normEps = r.doubleOr("rms_norm_eps", 1e-5);  // Olmo2Config's default
    c.qkvBias = c.outputProjBias = r.boolOr("attention_bias", false);
    c.qkNorm = true;
    c.recipe.qkNormOverHeads = true;
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = postNormDecoderWeightNames();
    return n;
  }

  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"Olmo2ForCausalLM"});
    c["model_type"] = "olmo2";
    c["attention_bias"] = false;
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    return hfDecoderDemoTensors(s, weightNames(), false, false, true, true);
  }

  void adjustDemoSpec(CheckpointSpec& s) const override {
    s.attentionBias = false;
    s.headDim = 0;
    s.slidingWindow = 0;
    s.useSlidingWindow = false;
    s.maxWindowLayers = 0;
  }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    validateHfDecoderDemoSpec(s);
    require(s.headDim == 0, "head_dim", "OLMo 2 derives head_dim from hidden_size / heads");
    require(s.slidingWindow == 0, "sliding_window", "OLMo 2 has no sliding window");
    require(!s.attentionBias, "attention_bias", "only Llama has the attention_bias option");
    require(!s.useSlidingWindow, "use_sliding_window", "only Qwen2 and Qwen3 have this switch");
    require(s.maxWindowLayers == 0, "max_window_layers", "only Qwen2 and Qwen3 have this option");
  }
};

}  // namespace

const ModelFamily& olmo2Family() {
  static const Olmo2Family f;
  return f;
}

}  // namespace kvscope
