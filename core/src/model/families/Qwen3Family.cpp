// Qwen3 (`qwen3`): the Llama block with a per-head RMSNorm of queries and keys before RoPE
// (q_norm, k_norm), `attention_bias` on q, k, v and o, an explicit `head_dim`, windows by
// `use_sliding_window` (QwenWindows.hpp). transformers: models/qwen3/modeling_qwen3.py.
#include "model/families/Families.hpp"
#include "model/families/QwenWindows.hpp"

namespace kvscope {

namespace {

class Qwen3Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Qwen3; }
  std::string modelType() const override { return "qwen3"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readDecoderConfig(r, c);
    c.qkvBias = c.outputProjBias = r.boolOr("attention_bias", false);
    c.qkNorm = true;
    readQwenWindows(r, c);
  }

  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"Qwen3ForCausalLM"});
    c["model_type"] = "qwen3";
    c["attention_bias"] = false;
    c["head_dim"] = s.resolvedHeadDim();
    addQwenDemoWindows(c, s);
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    return hfDecoderDemoTensors(s, false, false, true);
  }

  void adjustDemoSpec(CheckpointSpec& s) const override {
    s.attentionBias = false;
  }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    validateQwenDemoSpec(s);
  }

  void setDemoWindow(CheckpointSpec& s, int64_t window) const override {
    s.slidingWindow = window;
    s.useSlidingWindow = window > 0;  // the window applies only with use_sliding_window
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = hfDecoderWeightNames();
    return n;
  }
};

}  // namespace

const ModelFamily& qwen3Family() {
  static const Qwen3Family f;
  return f;
}

}  // namespace kvscope
