// What an attention path can leave out of a layer's attention while every K/V record stays
// right: Gemma 2's score soft-cap, GPT-OSS's learned sinks, the per-head layout of DeepSeek's
// kv_b_proj in an absorbed latent attention. The engine's faults drop one (softcap_dropped,
// sink_dropped, mla_absorb) and the audit's hypothesis passes test a dropped one.
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
};

}  // namespace kvscope::detail
