// SmolLM3 (`smollm3`): the Llama block with NoPE layers: `no_rope_layers` holds 1 for a layer
// that rotates and 0 for one without position encoding (absent: every
// `no_rope_layer_interval`-th layer, default 4, is NoPE); with `use_sliding_window` the NoPE
// layers slide unless `layer_types` says otherwise. transformers:
// models/smollm3/{configuration,modeling}_smollm3.py.
#include "kvscope/Error.hpp"
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/HfDecoderKit.hpp"
#include "util/InputLimits.hpp"

namespace kvscope {

namespace {

class SmolLm3Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::SmolLm3; }
  std::string modelType() const override { return "smollm3"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readDecoderConfig(r, c);
    c.qkvBias = c.outputProjBias = r.boolOr("attention_bias", false);
    c.tieWordEmbeddings = r.boolOr("tie_word_embeddings", true);
    c.ropeLayers.assign(static_cast<size_t>(c.numLayers), true);
    if (r.has("no_rope_layers")) {
      const auto& list = r.doc()["no_rope_layers"];
      if (!list.is_array() || static_cast<int64_t>(list.size()) != c.numLayers)
        throw InputError(r.file(), "no_rope_layers", "expected one 0 or 1 per layer");
      for (size_t i = 0; i < list.size(); ++i) {
        const int64_t v = r.asInt(list[i], "no_rope_layers");
        if (v != 0 && v != 1)
          throw InputError(r.file(), "no_rope_layers", "expected 0 (NoPE) or 1 (RoPE), found " +
                                                           std::to_string(v));
        c.ropeLayers[i] = v == 1;
      }
    }
    const int64_t interval = r.intOr("no_rope_layer_interval", 4);
    r.checkSize("no_rope_layer_interval", interval, limits::kLayers);  // beyond L: no NoPE layer
    for (int64_t i = 0; i < c.numLayers; ++i) c.intervalRopeLayers.push_back((i + 1) % interval != 0);
    if (!r.has("no_rope_layers")) c.ropeLayers = c.intervalRopeLayers;
    const int64_t window = r.intOr("sliding_window", 0);
    if (!r.boolOr("use_sliding_window", false) || window <= 0) return;
    if (!readLayerTypes(r, c, window)) {
      c.slidingWindow = window;
      for (int64_t i = 0; i < c.numLayers; ++i)
        c.slidingLayers[static_cast<size_t>(i)] = !c.ropeLayers[static_cast<size_t>(i)];
    }
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = hfDecoderWeightNames();
    return n;
  }

  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"SmolLM3ForCausalLM"});
    c["model_type"] = "smollm3";
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
    nlohmann::json rope = nlohmann::json::array();
    for (int64_t i = 0; i < s.numLayers; ++i) rope.push_back((i + 1) % 4 != 0 ? 1 : 0);
    c["no_rope_layers"] = rope;
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    return hfDecoderDemoTensors(s, false, false, false);
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
    require(s.headDim == 0, "head_dim", "SmolLM3 derives head_dim from hidden_size / heads");
    require(s.slidingWindow == 0, "sliding_window", "the SmolLM3 demo has no sliding window");
    require(!s.attentionBias, "attention_bias", "only Llama has the attention_bias option");
    require(!s.useSlidingWindow, "use_sliding_window", "only Qwen2 and Qwen3 have this switch");
    require(s.maxWindowLayers == 0, "max_window_layers", "only Qwen2 and Qwen3 have this option");
  }
};

}  // namespace

const ModelFamily& smolLm3Family() {
  static const SmolLm3Family f;
  return f;
}

}  // namespace kvscope
