// Mistral (`mistral`): the Llama block; a `sliding_window` applies to every layer (unless
// `layer_types` says otherwise), and `head_dim` may differ from hidden / heads (Mistral Small
// 3, Ministral). transformers: models/mistral/modeling_mistral.py.
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/HfDecoderKit.hpp"

namespace kvscope {

namespace {

class MistralFamily final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Mistral; }
  std::string modelType() const override { return "mistral"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readDecoderConfig(r, c);
    c.qkvBias = c.outputProjBias = r.boolOr("attention_bias", false);
    const int64_t window = r.intOr("sliding_window", 0);
    if (window <= 0) return;
    c.slidingWindow = window;
    c.slidingLayers.assign(static_cast<size_t>(c.numLayers), true);
    readLayerTypes(r, c, window);  // transformers 5 writes the per-layer choice; it wins
  }

  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"MistralForCausalLM"});
    c["model_type"] = "mistral";
    c["head_dim"] = s.resolvedHeadDim();
    c["sliding_window"] = s.slidingWindow > 0 ? nlohmann::json(s.slidingWindow) : nlohmann::json(nullptr);
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    return hfDecoderDemoTensors(s, false, false, false);
  }

  void adjustDemoSpec(CheckpointSpec& s) const override {
    s.attentionBias = false;
    s.useSlidingWindow = false;
    s.maxWindowLayers = 0;
  }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    validateHfDecoderDemoSpec(s);
    require(!s.attentionBias, "attention_bias", "only Llama has the attention_bias option");
    require(!s.useSlidingWindow, "use_sliding_window", "only Qwen2 and Qwen3 have this switch");
    require(s.maxWindowLayers == 0, "max_window_layers", "only Qwen2 and Qwen3 have this option");
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = hfDecoderWeightNames();
    return n;
  }
};

}  // namespace

const ModelFamily& mistralFamily() {
  static const MistralFamily f;
  return f;
}

}  // namespace kvscope
