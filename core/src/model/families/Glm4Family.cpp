// GLM-4 (`glm4`): the Llama block with four RMSNorms (input, post_self_attn on the attention
// output before the residual add, post_attention before the MLP, post_mlp on its output), biases
// on q/k/v but never on o, a fused gate|up projection (gate first), and partial rotary RoPE
// (default half of each head) pairing adjacent features (2i, 2i + 1). Absent keys take
// Glm4Config's defaults (head_dim 128, 2 KV heads, partial_rotary_factor 0.5, eps 1.5625e-07,
// attention_bias true). transformers: models/glm4/modeling_glm4.py.
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/HfDecoderKit.hpp"

namespace kvscope {

namespace {

class Glm4Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Glm4; }
  std::string modelType() const override { return "glm4"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readDecoderConfig(r, c, DecoderDefaults{2, 128, 10000.0, 0, 0.5});
    c.normEps = r.doubleOr("rms_norm_eps", 1.5625e-07);
    c.qkvBias = r.boolOr("attention_bias", true);
    c.outputProjBias = false;  // o_proj never has a bias
    c.recipe.fusedGateUp = true;
    c.recipe.ropeInterleaved = true;
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = [] {
      WeightNames w = hfDecoderWeightNames();
      w.oBias = "";
      w.postAttnNorm = "post_self_attn_layernorm.weight";
      w.postMlpNorm = "post_mlp_layernorm.weight";  // mlpNorm: post_attention_layernorm (pre-MLP)
      w.gate = w.up = w.gateBias = w.upBias = w.downBias = "";
      w.gateUp = "mlp.gate_up_proj.weight";
      return w;
    }();
    return n;
  }

  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"Glm4ForCausalLM"});
    c["model_type"] = "glm4";
    c["attention_bias"] = true;
    c["head_dim"] = s.resolvedHeadDim();
    c["partial_rotary_factor"] = 0.5;
    if (c.contains("rope_parameters")) c["rope_parameters"]["partial_rotary_factor"] = 0.5;
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    return hfDecoderDemoTensors(s, weightNames(), true, false, false, false);
  }

  void adjustDemoSpec(CheckpointSpec& s) const override {
    s.attentionBias = true;
    s.slidingWindow = 0;
    s.useSlidingWindow = false;
    s.maxWindowLayers = 0;
  }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    validateHfDecoderDemoSpec(s);
    require(s.resolvedHeadDim() % 4 == 0, "head_dim",
            "GLM-4 rotates half of each head, which needs a head_dim divisible by 4");
    require(s.slidingWindow == 0, "sliding_window", "GLM-4 has no sliding window");
    require(!s.useSlidingWindow, "use_sliding_window", "only Qwen2 and Qwen3 have this switch");
    require(s.maxWindowLayers == 0, "max_window_layers", "only Qwen2 and Qwen3 have this option");
  }
};

}  // namespace

const ModelFamily& glm4Family() {
  static const Glm4Family f;
  return f;
}

}  // namespace kvscope
