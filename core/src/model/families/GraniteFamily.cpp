// Granite (`granite`): the Llama block scaled by four multipliers: embeddings x
// embedding_multiplier, attention scores x attention_multiplier (in place of 1/sqrt(head_dim)),
// each sublayer's output x residual_multiplier before the residual add, logits /
// logits_scaling; `attention_bias` on q, k, v and o. transformers:
// models/granite/modeling_granite.py.
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/HfDecoderKit.hpp"

namespace kvscope {

namespace {

class GraniteFamily final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Granite; }
  std::string modelType() const override { return "granite"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readDecoderConfig(r, c);
    c.qkvBias = c.outputProjBias = r.boolOr("attention_bias", false);
    c.embeddingMultiplier = positiveNumber(r, "embedding_multiplier", 1.0);
    c.attentionScale = positiveNumber(r, "attention_multiplier", 1.0);
    c.residualMultiplier = positiveNumber(r, "residual_multiplier", 1.0);
    c.logitsDivisor = positiveNumber(r, "logits_scaling", 1.0);
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = hfDecoderWeightNames();
    return n;
  }

  // The demo's multipliers are Granite 3's kind: far from 1, so one dropped shows.
  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"GraniteForCausalLM"});
    c["model_type"] = "granite";
    c["attention_bias"] = s.attentionBias;
    c["mlp_bias"] = false;
    c["embedding_multiplier"] = 3.0;
    c["attention_multiplier"] = 0.15;
    c["residual_multiplier"] = 0.5;
    c["logits_scaling"] = 4.0;
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    return hfDecoderDemoTensors(s, s.attentionBias, s.attentionBias, false);
  }

  void adjustDemoSpec(CheckpointSpec& s) const override {
    s.headDim = 0;
    s.slidingWindow = 0;
    s.useSlidingWindow = false;
    s.maxWindowLayers = 0;
  }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    validateHfDecoderDemoSpec(s);
    require(s.headDim == 0, "head_dim", "Granite derives head_dim from hidden_size / heads");
    require(s.slidingWindow == 0, "sliding_window", "Granite has no sliding window");
    require(!s.useSlidingWindow, "use_sliding_window", "only Qwen2 and Qwen3 have this switch");
    require(s.maxWindowLayers == 0, "max_window_layers", "only Qwen2 and Qwen3 have this option");
  }
};

}  // namespace

const ModelFamily& graniteFamily() {
  static const GraniteFamily f;
  return f;
}

}  // namespace kvscope
