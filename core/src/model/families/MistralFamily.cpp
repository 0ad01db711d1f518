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
