// What an attention path can leave out of a layer's attention while every K/V record stays
// right: Gemma 2's score soft-cap, GPT-OSS's learned sinks, the per-head layout of DeepSeek's
// kv_b_proj in an absorbed latent attention, yarn's mscale in DeepSeek's softmax scale. The
// engine's faults drop one (softcap_dropped, sink_dropped, mla_absorb, score_mscale) and the
// audit's hypothesis passes test a dropped one.
#pragma once

namespace kvscope::detail {

enum class AttentionFeature {
  Softcap,  // attn_logit_softcapping: scores -> tanh(scores / cap) * cap before the mask
  Sinks,    // self_attn.sinks: one learned logit per head joins each query's softmax
  // MLA's kv_b_proj holds per head [nope key rows | value rows]; an absorbed path (queries
  // through the key rows, the latent context through the value rows) that splits it as every
  // head's key rows, then every head's value rows, attends with weights that do not match the
  // latent (mla_absorb).
  LatentHeadSplit,
  // DeepSeek's softmax scale is qk_head_dim^-0.5 times yarn's mscale(factor, mscale_all_dim)^2
  // (MlaConfig::scoreMscale); a path that leaves the mscale out scores flatter (transformers
  // 4.x's DeepseekV2Attention: score_mscale).
  ScoreMscale,
};

}  // namespace kvscope::detail
