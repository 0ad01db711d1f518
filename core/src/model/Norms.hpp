// The normalisations the decoder blocks compose: LayerNorm (GPT-2) and RMSNorm (the Llama
// family; also per head over the last dimension for q/k norm), computed in float32 as
// transformers does for float32 activations.
#pragma once

#include <torch/torch.h>

namespace kvscope::detail {

/// weight * (x / sqrt(mean(x^2 over the last dim) + eps)).
inline torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  auto variance = x.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (x * torch::rsqrt(variance + eps));
}

inline torch::Tensor layerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, double eps) {
  return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
}

}  // namespace kvscope::detail
