// What an attention path can leave out of a layer's attention while every K/V record stays
// right: Gemma 2's score soft-cap, GPT-OSS's learned sinks. The engine's faults drop one
// (softcap_dropped, sink_dropped) and the audit's hypothesis passes test a dropped one.
#pragma once

namespace kvscope::detail {

enum class AttentionFeature {
  Softcap,  // attn_logit_softcapping: scores -> tanh(scores / cap) * cap before the mask
  Sinks,    // self_attn.sinks: one learned logit per head joins each query's softmax
};

}  // namespace kvscope::detail
