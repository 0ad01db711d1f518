// DeepSeek V2 / V2-Lite / V2.5 (`deepseek_v2`): multi-head latent attention as in V3
// (LatentAttentionKit: q LoRA or q_proj, the cached latent c_kv and roped key part k_pe,
// kv_b_proj's decompression, yarn's mscale^2 on the scores), with two differences transformers
// 5 computes: the roped part turns as complex numbers over (even, odd) feature pairs, left in
// place (apply_rotary_emb's view_as_complex: the cached k_pe stays interleaved), and the experts
// are chosen by softmax probability. topk_method "greedy" (the default): the num_experts_per_tok
// most probable; "group_limited_greedy": only within the topk_group groups (of n_group) whose
// best probability is highest. The weights are the chosen probabilities times
// routed_scaling_factor, never renormalised (transformers' DeepseekV2TopkRouter ignores
// norm_topk_prob). Dense MLP on the first first_k_dense_replace layers, shared experts beside
// the routed ones.
// transformers: models/deepseek_v2/{configuration,modeling}_deepseek_v2.py.
#include "kvscope/Error.hpp"
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/LatentAttentionKit.hpp"

namespace kvscope {

namespace {

class DeepseekV2Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::DeepseekV2; }
  std::string modelType() const override { return "deepseek_v2"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readLatentAttentionConfig(r, c, MlaConfig::RopePairs::InPlacePairs);
    const std::string method = r.stringOr("topk_method", "greedy");
    if (method != "greedy" && method != "group_limited_greedy")
      throw InputError(r.file(), "topk_method",
                       "\"" + method + "\": transformers' DeepSeek V2 routes by \"greedy\" or \"group_limited_greedy\"");
    // DeepseekV2Config has no num_experts_per_tok default (None): a MoE layer needs it.
    if (r.intOr("n_routed_experts", 64) > 0 && !r.has("num_experts_per_tok"))
      throw InputError(r.file(), "num_experts_per_tok", "missing: DeepSeek V2's router needs the experts per token");
    const bool grouped = method == "group_limited_greedy";
    // DeepseekV2Config's defaults.
    readLatentMoe(r, c, LatentMoeDefaults{64, 0, 1407, 2, 0, 1.0}, grouped, 1);
    c.moe.routing = grouped ? MoeConfig::Routing::SoftmaxGroupLimited : MoeConfig::Routing::SoftmaxThenTopK;
    c.moe.normTopK = false;
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = latentAttentionWeightNames(false);
    return n;
  }

  // make-demo: LatentAttentionKit's shapes, in-place pairs, group-limited softmax routing.
  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = latentAttentionDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"DeepseekV2ForCausalLM"});
    c["model_type"] = "deepseek_v2";
    c["topk_method"] = "group_limited_greedy";
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    return latentAttentionDemoTensors(s, weightNames());
  }

  void adjustDemoSpec(CheckpointSpec& s) const override { adjustLatentAttentionDemoSpec(s); }
  void validateDemoSpec(const CheckpointSpec& s) const override { validateLatentAttentionDemoSpec(s, "DeepSeek V2"); }
};

}  // namespace

const ModelFamily& deepseekV2Family() {
  static const DeepseekV2Family f;
  return f;
}

}  // namespace kvscope
