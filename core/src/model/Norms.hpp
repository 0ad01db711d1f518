// The normalisations the decoder blocks compose: LayerNorm (GPT-2) and RMSNorm (the Llama
// family; also per head over the last dimension for q/k norm), computed in float32 as
// transformers does for float32 activations.
#pragma once

#include <torch/torch.h>

#include "kvscope/ModelConfig.hpp"

namespace kvscope::detail {

/// What an RMSNorm of `kind` multiplies by, from its stored weight: the weight, or Gemma's
/// (1 + w) in float32 as transformers' Gemma RMSNorm computes it.
inline torch::Tensor rmsMultiplier(const torch::Tensor& w, BlockRecipe::Norm kind) {
  if (kind == BlockRecipe::Norm::RmsNormPlusOne) return w.to(torch::kFloat) + 1.0;
  return w;
}

/// weight * (x / sqrt(mean(x^2 over the last dim) + eps)); an undefined weight: none (Llama
/// 4's weightless q/k "L2" norm).
inline torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  auto variance = x.pow(2).mean(-1, /*keepdim=*/true);
  auto normed = x * torch::rsqrt(variance + eps);
  return weight.defined() ? weight * normed : normed;
}

inline torch::Tensor layerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, double eps) {
  return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
}

}  // namespace kvscope::detail
