// Qwen3-MoE (`qwen3_moe`): the Qwen3 block (per-head q/k RMSNorm before RoPE) whose MLP is a
// sparse mixture of experts on the layers decoder_sparse_step picks (every layer by default)
// outside mlp_only_layers: a router (mlp.gate) with softmax over num_experts, the
// num_experts_per_tok most probable experts (renormalised with norm_topk_prob), each a gated
// MLP of moe_intermediate_size (mlp.experts.E.{gate,up,down}_proj). use_sliding_window puts
// the window on every layer. Absent keys take Qwen3MoeConfig's defaults.
// transformers: models/qwen3_moe/modeling_qwen3_moe.py.
#include <algorithm>

#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/HfDecoderKit.hpp"
#include "util/InputLimits.hpp"

namespace kvscope {

namespace {

constexpr int64_t kDemoExperts = 4, kDemoTopK = 2;

class Qwen3MoeFamily final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Qwen3Moe; }
  std::string modelType() const override { return "qwen3_moe"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readDecoderConfig(r, c, DecoderDefaults{4, 0, 10000.0});
    c.qkvBias = c.outputProjBias = r.boolOr("attention_bias", false);
    c.qkNorm = true;
    const int64_t window = r.intOr("sliding_window", 0);
    if (r.boolOr("use_sliding_window", false) && window > 0) {
      c.slidingWindow = window;
      c.slidingLayers.assign(static_cast<size_t>(c.numLayers), true);
    }
    readQwenSparseMoe(r, c, 128, 8, 768, false);
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = [] {
      WeightNames w = hfDecoderWeightNames();
      w.router = "mlp.gate.weight";
      w.expertPrefix = "mlp.experts.";
      w.expertGate = "gate_proj.weight";
      w.expertUp = "up_proj.weight";
      w.expertDown = "down_proj.weight";
      return w;
    }();
    return n;
  }

  // make-demo: 4 experts, 2 per token, renormalised, each half the dense MLP's width; the
  // last layer dense (mlp_only_layers), so both kinds are in the file.
  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"Qwen3MoeForCausalLM"});
    c["model_type"] = "qwen3_moe";
    c["attention_bias"] = false;
    c["head_dim"] = s.resolvedHeadDim();
    c["num_experts"] = kDemoExperts;
    c["num_experts_per_tok"] = kDemoTopK;
    c["moe_intermediate_size"] = demoExpertWidth(s);
    c["norm_topk_prob"] = true;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = nlohmann::json::array({s.numLayers - 1});
    c["use_sliding_window"] = s.slidingWindow > 0;
    c["sliding_window"] = s.slidingWindow > 0 ? nlohmann::json(s.slidingWindow) : nlohmann::json(nullptr);
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    const WeightNames& n = weightNames();
    return moeDemoTensors(s, n, hfDecoderDemoTensors(s, n, false, false, true, false), kDemoExperts,
                          demoExpertWidth(s), {s.numLayers - 1});
  }

  void adjustDemoSpec(CheckpointSpec& s) const override {
    s.attentionBias = false;
    s.useSlidingWindow = false;
    s.maxWindowLayers = 0;
  }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    validateHfDecoderDemoSpec(s);
    require(!s.attentionBias, "attention_bias", "only Llama has the attention_bias option");
    require(!s.useSlidingWindow, "use_sliding_window", "qwen3_moe's demo sets it from --sliding-window");
    require(s.maxWindowLayers == 0, "max_window_layers", "Qwen3-MoE's window is on every layer");
    require(s.numLayers >= 2, "num_layers", "the demo has MoE layers and one dense layer: at least 2");
  }
};

}  // namespace

const ModelFamily& qwen3MoeFamily() {
  static const Qwen3MoeFamily f;
  return f;
}

}  // namespace kvscope
