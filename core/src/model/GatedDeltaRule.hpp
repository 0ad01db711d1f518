// The gated delta rule of Gated DeltaNet layers (Qwen3.5's linear_attention), in the two forms
// transformers computes it (models/qwen3_5/modeling_qwen3_5.py): the chunked form over a whole
// sequence (torch_chunk_gated_delta_rule: the uncached reference and a prefill) and the
// recurrent form one token at a time (torch_recurrent_gated_delta_rule: a cached decode step).
// Both L2-norm q and k per head (eps 1e-6), scale q by Dk^-0.5 and run in float32. Per value head,
// with state S [Dk, Dv]: S <- exp(g) S; S <- S + k (beta (v - S^T k))^T; out = S^T q.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace kvscope::detail {

struct DeltaRuleResult {
  torch::Tensor out;    // [B, s, Hv, Dv]
  torch::Tensor state;  // [B, Hv, Dk, Dv] after the last token
};

/// q, k [B, s, Hv, Dk] (key heads already repeated to the value heads), v [B, s, Hv, Dv],
/// g (log decay, <= 0) and beta [B, s, Hv]; `initial` [B, Hv, Dk, Dv] or undefined (zeros).
DeltaRuleResult chunkedGatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& g, const torch::Tensor& beta,
                                      const torch::Tensor& initial, int64_t chunk = 64);
DeltaRuleResult recurrentGatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        const torch::Tensor& g, const torch::Tensor& beta,
                                        const torch::Tensor& initial);

}  // namespace kvscope::detail
