// Qwen2 (`qwen2`): the Llama block with biases on q, k and v (never on o); windows by
// `use_sliding_window` (QwenWindows.hpp). transformers: models/qwen2/modeling_qwen2.py.
#include "model/families/Families.hpp"
#include "model/families/QwenWindows.hpp"

namespace kvscope {

namespace {

class Qwen2Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Qwen2; }
  std::string modelType() const override { return "qwen2"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readDecoderConfig(r, c);
    c.qkvBias = true;
    c.outputProjBias = false;
    readQwenWindows(r, c);
  }

  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"Qwen2ForCausalLM"});
    c["model_type"] = "qwen2";
    if (s.headDim > 0) c["head_dim"] = s.headDim;
    addQwenDemoWindows(c, s);
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    return hfDecoderDemoTensors(s, true, false, false);
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

const ModelFamily& qwen2Family() {
  static const Qwen2Family f;
  return f;
}

}  // namespace kvscope
