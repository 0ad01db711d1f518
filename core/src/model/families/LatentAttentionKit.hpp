// What DeepSeek V2 and V3 share: multi-head latent attention's config keys and cache geometry,
// their weight names (latent attention, a dense MLP on the first layers, routed experts one
// tensor each beside shared experts), the keys of that mixture of experts every routing reads,
// and make-demo's config and tensors.
#pragma once

#include <vector>

#include "kvscope/CheckpointSpec.hpp"
#include "kvscope/CheckpointWriter.hpp"
#include "kvscope/ModelConfig.hpp"
#include "model/families/ModelFamily.hpp"

namespace kvscope {

class ConfigReader;

/// The decoder keys and config.mla (q/kv LoRA ranks, nope/rope/value widths), the cache's geometry
/// (one latent row of kv_lora_rank as keys, one roped key part as values), the score scale
/// (qk_head_dim^-0.5 times yarn's mscale(factor, mscale_all_dim)^2) and attention_bias; `pairs`:
/// how the roped part's features pair up. InputError naming the field.
void readLatentAttentionConfig(const ConfigReader& r, ModelConfig& c, MlaConfig::RopePairs pairs);

/// The class defaults of DeepSeek's MoE keys where a config leaves them out.
struct LatentMoeDefaults {
  int64_t experts, topK, width, sharedExperts, denseLayers;
  double routedScale;
  int64_t groups = 0, topGroups = 0;  // n_group, topk_group; 0: no default (a grouped routing
                                      // without the key is refused, as DeepseekV2Config's None)
};
/// n_routed_experts, num_experts_per_tok, moe_intermediate_size, n_shared_experts,
/// routed_scaling_factor and first_k_dense_replace into c.moe; with `grouped`, n_group and
/// topk_group too (required where `d` has no default; groups that divide the experts, each of at least `minPerGroup`, enough experts
/// in the chosen groups). InputError naming the field.
void readLatentMoe(const ConfigReader& r, ModelConfig& c, const LatentMoeDefaults& d, bool grouped,
                   int64_t minPerGroup);

/// model.layers.N.self_attn.{q_proj | q_a_proj, q_a_layernorm, q_b_proj}, kv_a_proj_with_mqa,
/// kv_a_layernorm, kv_b_proj, o_proj; mlp.gate, mlp.experts.E.{gate,up,down}_proj and
/// mlp.shared_experts.*; `scoreBias`: mlp.gate.e_score_correction_bias.
WeightNames latentAttentionWeightNames(bool scoreBias);

/// make-demo: head_dim splits into a nope and a roped half (each at least 2, the roped part even),
/// values of head_dim, a latent of twice head_dim, a query LoRA of half the hidden size; 4 experts
/// in 2 groups (1 taken, 2 experts per token) and a shared expert beyond the first layer, dense.
nlohmann::json latentAttentionDemoConfig(const CheckpointSpec& s);
std::vector<CheckpointWriter::TensorPlan> latentAttentionDemoTensors(const CheckpointSpec& s, const WeightNames& n);
/// Every head decompressed (kv heads = heads), no bias, no window.
void adjustLatentAttentionDemoSpec(CheckpointSpec& s);
void validateLatentAttentionDemoSpec(const CheckpointSpec& s, const std::string& family);

}  // namespace kvscope
