// Mixtral (`mixtral`): the Mistral block (no biases, a sliding window on every layer when
// sliding_window is set) whose every MLP is a sparse mixture of experts: a router
// (block_sparse_moe.gate) with softmax over num_local_experts in float32, the
// num_experts_per_tok most probable experts always renormalised to 1, each a SiLU-gated MLP of
// intermediate_size (block_sparse_moe.experts.E.{w1 gate, w3 up, w2 down}, the names
// save_pretrained writes). Absent keys take MixtralConfig's defaults (theta 1e6, 8 KV heads,
// 8 experts, 2 per token, eps 1e-5). transformers: models/mixtral/modeling_mixtral.py.
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/HfDecoderKit.hpp"

namespace kvscope {

namespace {

constexpr int64_t kMixtralDemoExperts = 4, kMixtralDemoTopK = 2;

class MixtralFamily final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Mixtral; }
  std::string modelType() const override { return "mixtral"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readDecoderConfig(r, c, DecoderDefaults{8, 0, 1e6});
    c.normEps = r.doubleOr("rms_norm_eps", 1e-5);
    const int64_t window = r.intOr("sliding_window", 0);
    if (window > 0) {
      c.slidingWindow = window;
      c.slidingLayers.assign(static_cast<size_t>(c.numLayers), true);
    }
    MoeConfig& m = c.moe;
    readExpertCounts(r, m, "num_local_experts", "num_experts", 8, 2);
    m.layers.assign(static_cast<size_t>(c.numLayers), m.numExperts > 0);
    m.intermediateSize = c.intermediateSize;
    m.normTopK = true;  // MixtralSparseMoeBlock renormalises the chosen probabilities always
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = [] {
      WeightNames w = hfDecoderWeightNames();
      w.router = "block_sparse_moe.gate.weight";
      w.expertPrefix = "block_sparse_moe.experts.";
      w.expertGate = "w1.weight";
      w.expertUp = "w3.weight";
      w.expertDown = "w2.weight";
      return w;
    }();
    return n;
  }

  // make-demo: 4 experts, 2 per token, each intermediate_size wide, on every layer.
  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"MixtralForCausalLM"});
    c["model_type"] = "mixtral";
    c["head_dim"] = s.headDim > 0 ? nlohmann::json(s.headDim) : nlohmann::json(nullptr);
    c["num_local_experts"] = kMixtralDemoExperts;
    c["num_experts_per_tok"] = kMixtralDemoTopK;
    c["router_jitter_noise"] = 0.0;
    c["sliding_window"] = s.slidingWindow > 0 ? nlohmann::json(s.slidingWindow) : nlohmann::json(nullptr);
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    const WeightNames& n = weightNames();
    return moeDemoTensors(s, n, hfDecoderDemoTensors(s, n, false, false, false, false), kMixtralDemoExperts,
                          s.intermediateSize, {});
  }

  void adjustDemoSpec(CheckpointSpec& s) const override {
    s.attentionBias = false;
    s.useSlidingWindow = false;
    s.maxWindowLayers = 0;
  }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    validateHfDecoderDemoSpec(s);
    require(!s.attentionBias, "attention_bias", "Mixtral has no attention biases");
    require(!s.useSlidingWindow, "use_sliding_window", "Mixtral's window is on every layer");
    require(s.maxWindowLayers == 0, "max_window_layers", "Mixtral's window is on every layer");
  }
};

}  // namespace

const ModelFamily& mixtralFamily() {
  static const MixtralFamily f;
  return f;
}

}  // namespace kvscope
