// Qwen3.5 text (`qwen3_5_text`; a `qwen3_5` checkpoint's text_config): layers by `layer_types`
// (absent: every full_attention_interval-th layer, default 4, full attention, the others
// linear_attention):
// - linear_attention: a Gated DeltaNet (DeltaNetConfig): in_proj_qkv through a causal depthwise
//   conv1d (linear_conv_kernel_dim, SiLU), q and k L2-normed per head, the gated delta rule with
//   decay -exp(A_log) softplus(a + dt_bias) and rate sigmoid(b); its output RMS-normed per value
//   head (a plain weight) and gated by silu(in_proj_z); out_proj;
// - full_attention: the Qwen3 block (q/k RMSNorm per head before RoPE) whose q_proj yields each
//   head's query and a gate, the output multiplied by sigmoid(gate) before o_proj; RoPE on the
//   first partial_rotary_factor (default 0.25) of each head, (i, i + r/2) pairs (text positions:
//   mrope's sections all take the same position);
// - every RMSNorm but the DeltaNet's output norm zero-centred: (1 + w), weights stored as w;
// - a dense MLP on every layer.
// Absent keys take Qwen3_5TextConfig's defaults. transformers: models/qwen3_5/modeling_qwen3_5.py.
#include "model/families/Families.hpp"
#include "model/families/GatedDeltaNetKit.hpp"
#include "model/families/HfDecoderKit.hpp"

namespace kvscope {

namespace {

class Qwen3_5Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Qwen3_5; }
  std::string modelType() const override { return "qwen3_5_text"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override { readGatedDeltaNetConfig(r, c, "Qwen3.5"); }

  const WeightNames& weightNames() const override {
    static const WeightNames n = [] {
      WeightNames w = hfDecoderWeightNames();
      addDeltaNetWeightNames(w, /*fused=*/false);
      return w;
    }();
    return n;
  }

  // make-demo: full attention every spec.fullAttentionInterval-th layer, the others Gated
  // DeltaNets (interval 0: alternating from a DeltaNet, so that a two-layer demo has one of
  // each; released Qwen3.5 has 4), the DeltaNets with the spec's linear heads (default: as many
  // key heads as its KV heads, value heads as its heads, each head_dim wide).
  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"Qwen3_5ForCausalLM"});
    c["model_type"] = "qwen3_5_text";
    addDeltaNetDemoConfig(c, s);
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    const WeightNames& n = weightNames();
    return deltaNetDemoTensors(s, n, hfDecoderDemoTensors(s, n, false, false, true, false));
  }

  void adjustDemoSpec(CheckpointSpec& s) const override { adjustDeltaNetDemoSpec(s); }

  void validateDemoSpec(const CheckpointSpec& s) const override { validateDeltaNetDemoSpec(s); }
};

}  // namespace

const ModelFamily& qwen3_5Family() {
  static const Qwen3_5Family f;
  return f;
}

}  // namespace kvscope
