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
