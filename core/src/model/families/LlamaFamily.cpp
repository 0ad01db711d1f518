// Llama (`llama`): the HuggingFace decoder kit as is; `attention_bias` puts biases on q, k, v
// and o. transformers: models/llama/modeling_llama.py.
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/HfDecoderKit.hpp"

namespace kvscope {

namespace {

class LlamaFamily final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Llama; }
  std::string modelType() const override { return "llama"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readDecoderConfig(r, c);
    c.qkvBias = c.outputProjBias = r.boolOr("attention_bias", false);
    if (const int64_t window = r.intOr("sliding_window", 0); window > 0) readLayerTypes(r, c, window);
  }

  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"LlamaForCausalLM"});
    c["model_type"] = "llama";
    c["attention_bias"] = s.attentionBias;
    c["head_dim"] = s.resolvedHeadDim();
    c["mlp_bias"] = false;
    c["pretraining_tp"] = 1;
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    return hfDecoderDemoTensors(s, s.attentionBias, s.attentionBias, false);
  }

  void adjustDemoSpec(CheckpointSpec& s) const override {
    s.slidingWindow = 0;
    s.useSlidingWindow = false;
    s.maxWindowLayers = 0;
  }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    validateHfDecoderDemoSpec(s);
    require(s.slidingWindow == 0, "sliding_window", "Llama has no sliding window");
    require(!s.useSlidingWindow, "use_sliding_window", "only Qwen2 and Qwen3 have this switch");
    require(s.maxWindowLayers == 0, "max_window_layers", "only Qwen2 and Qwen3 have this option");
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = hfDecoderWeightNames();
    return n;
  }
};

}  // namespace

const ModelFamily& llamaFamily() {
  static const LlamaFamily f;
  return f;
}

}  // namespace kvscope
