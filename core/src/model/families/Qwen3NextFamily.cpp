// Qwen3-Next (`qwen3_next`): the Qwen3.5 layer pattern (GatedDeltaNetKit.hpp: Gated DeltaNets and
// output-gated full attention by layer_types, zero-centred norms, partial rotary 0.25) with
// - the DeltaNet's q | k | v | z and b | a projections fused per key-head group
//   (linear_attn.in_proj_qkvz, in_proj_ba; transformers' fix_query_key_value_ordering);
// - a sparse mixture of experts on the layers decoder_sparse_step picks outside mlp_only_layers:
//   softmax router (mlp.gate), the num_experts_per_tok most probable experts (renormalised with
//   norm_topk_prob), each a gated MLP of moe_intermediate_size, beside a shared expert of
//   shared_expert_intermediate_size whose output is scaled by sigmoid(shared_expert_gate x); a
//   dense MLP of intermediate_size elsewhere.
// Absent keys take Qwen3NextConfig's defaults. transformers: models/qwen3_next/modeling_qwen3_next.py.
#include <algorithm>

#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/GatedDeltaNetKit.hpp"
#include "model/families/HfDecoderKit.hpp"

namespace kvscope {

namespace {

constexpr int64_t kNextDemoExperts = 4, kNextDemoTopK = 2;

class Qwen3NextFamily final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Qwen3Next; }
  std::string modelType() const override { return "qwen3_next"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readGatedDeltaNetConfig(r, c, "Qwen3-Next", /*kvHeads=*/2);
    readQwenSparseMoe(r, c, 512, 10, 512, true);
    if (c.moe.numExperts > 0) readQwenSharedExpert(r, c, 512);
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = [] {
      WeightNames w = hfDecoderWeightNames();
      addDeltaNetWeightNames(w, /*fused=*/true);
      addQwenSharedExpertMoeNames(w);
      return w;
    }();
    return n;
  }

  // make-demo: the Qwen3.5 demo's layers (GatedDeltaNetKit) with fused DeltaNet projections, 4
  // experts (2 per token, renormalised) half the dense MLP's width beside a gated shared expert
  // of its width on every layer but the last (mlp_only_layers), so both MLP kinds are in the file.
  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = hfDecoderDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"Qwen3NextForCausalLM"});
    c["model_type"] = "qwen3_next";
    addDeltaNetDemoConfig(c, s);
    c["num_experts"] = kNextDemoExperts;
    c["num_experts_per_tok"] = kNextDemoTopK;
    c["moe_intermediate_size"] = demoExpertWidth(s);
    c["shared_expert_intermediate_size"] = s.intermediateSize;
    c["norm_topk_prob"] = true;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = nlohmann::json::array({s.numLayers - 1});
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    const WeightNames& n = weightNames();
    return withQwenSharedExperts(
        s, n,
        moeDemoTensors(s, n, deltaNetDemoTensors(s, n, hfDecoderDemoTensors(s, n, false, false, true, false)),
                       kNextDemoExperts, demoExpertWidth(s), {s.numLayers - 1}),
        kNextDemoExperts);
  }

  void adjustDemoSpec(CheckpointSpec& s) const override { adjustDeltaNetDemoSpec(s); }

  void validateDemoSpec(const CheckpointSpec& s) const override {
    validateDeltaNetDemoSpec(s);
    require(s.numLayers >= 2, "num_layers", "the demo has MoE layers and one dense layer: at least 2");
  }
};

}  // namespace

const ModelFamily& qwen3NextFamily() {
  static const Qwen3NextFamily f;
  return f;
}

}  // namespace kvscope
