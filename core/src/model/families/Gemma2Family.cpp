// Gemma 2 (`gemma2`): the Gemma block (GemmaKit.hpp) with both soft-caps on by default
// (attention 50, logits 30) and sliding and full layers alternating (layer_types, else every
// even layer slides). transformers: models/gemma2/modeling_gemma2.py.
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/GemmaKit.hpp"

namespace kvscope {

namespace {

class Gemma2Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Gemma2; }
  std::string modelType() const override { return "gemma2"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readGemmaConfig(r, c, GemmaDefaults{10000.0, 50.0, 30.0});
    const int64_t window = readGemmaWindow(r);
    if (window == 0) return;
    if (!readLayerTypes(r, c, window)) {  // transformers' default: layers 0, 2, 4, ... slide
      c.slidingWindow = window;
      for (int64_t i = 0; i < c.numLayers; ++i) c.slidingLayers[static_cast<size_t>(i)] = i % 2 == 0;
    }
  }

  const WeightNames& weightNames() const override { return gemmaWeightNames(); }

  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = gemmaDemoConfig(s, "Gemma2ForCausalLM", "gemma2");
    c["attn_logit_softcapping"] = 50.0;
    c["final_logit_softcapping"] = 30.0;
    // Layers 0, 2, ... slide (Gemma 2's pattern), over --sliding-window or Gemma's 4096.
    nlohmann::json types = nlohmann::json::array();
    for (int64_t i = 0; i < s.numLayers; ++i) types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    c["layer_types"] = types;
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    return hfDecoderDemoTensors(s, weightNames(), false, false, false, false);
  }

  void adjustDemoSpec(CheckpointSpec& s) const override { adjustGemmaDemoSpec(s); }
  void validateDemoSpec(const CheckpointSpec& s) const override { validateGemmaDemoSpec(s); }
};

}  // namespace

const ModelFamily& gemma2Family() {
  static const Gemma2Family f;
  return f;
}

}  // namespace kvscope
