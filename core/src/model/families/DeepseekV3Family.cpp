// DeepSeek V3 (`deepseek_v3`; Kimi K2 and GLM-5 ship this block): multi-head latent attention
// and a sigmoid-routed mixture of experts with expert groups.
//
// Attention (LatentAttentionKit, MlaConfig): the query is q_proj's, or q_b_proj(q_a_layernorm(
// q_a_proj x)) with q_lora_rank; kv_a_proj_with_mqa yields a latent c_kv [kv_lora_rank] (normed by
// kv_a_layernorm) and one roped key part k_pe [qk_rope_head_dim] per token, which are what the
// cache holds (transformers 5 caches them as keys [B, 1, t, kv_lora_rank] and values
// [B, 1, t, qk_rope_head_dim]); kv_b_proj decompresses each head's key (nope | rope) and value
// [v_head_dim]. rope_interleave (default true): the roped features are taken in (even, odd) pairs
// and come out de-interleaved (false: half-split pairs). Scores scale by qk_head_dim^-0.5 times
// yarn's mscale(factor, mscale_all_dim)^2. Both small norms use eps 1e-6 whatever rms_norm_eps
// says (transformers builds them with the default).
//
// MLP: dense on the first first_k_dense_replace layers; beyond, n_routed_experts gated experts
// (mlp.experts.E.{gate,up,down}_proj) of which a token takes num_experts_per_tok: scores
// sigmoid(router logits), choice scores plus e_score_correction_bias, only within the topk_group
// groups (of n_group) whose two best choice scores sum highest; the weights are the plain scores
// of the chosen, renormalised with norm_topk_prob, times routed_scaling_factor; plus
// n_shared_experts shared experts as one gated MLP every token takes.
// transformers: models/deepseek_v3/{configuration,modeling}_deepseek_v3.py.
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/LatentAttentionKit.hpp"

namespace kvscope {

namespace {

class DeepseekV3Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::DeepseekV3; }
  std::string modelType() const override { return "deepseek_v3"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    readLatentAttentionConfig(r, c, r.boolOr("rope_interleave", true) ? MlaConfig::RopePairs::Deinterleaved
                                                                      : MlaConfig::RopePairs::HalfSplit);
    // DeepseekV3Config's defaults.
    readLatentMoe(r, c, LatentMoeDefaults{256, 8, 2048, 1, 3, 2.5, 8, 4}, true, 2);
    c.moe.routing = MoeConfig::Routing::SigmoidGroupLimited;
    c.moe.normTopK = r.boolOr("norm_topk_prob", true);
  }

  const WeightNames& weightNames() const override {
    static const WeightNames n = latentAttentionWeightNames(true);
    return n;
  }

  // make-demo: LatentAttentionKit's shapes, interleaved pairs, renormalised sigmoid routing.
  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = latentAttentionDemoConfig(s);
    c["architectures"] = nlohmann::json::array({"DeepseekV3ForCausalLM"});
    c["model_type"] = "deepseek_v3";
    c["rope_interleave"] = true;
    c["norm_topk_prob"] = true;
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    return latentAttentionDemoTensors(s, weightNames());
  }

  void adjustDemoSpec(CheckpointSpec& s) const override { adjustLatentAttentionDemoSpec(s); }
  void validateDemoSpec(const CheckpointSpec& s) const override { validateLatentAttentionDemoSpec(s, "DeepSeek V3"); }
};

}  // namespace

const ModelFamily& deepseekV3Family() {
  static const DeepseekV3Family f;
  return f;
}

}  // namespace kvscope
