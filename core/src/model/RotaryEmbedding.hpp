// Rotary position embedding with transformers' inverse-frequency rules: default, linear,
// dynamic (NTK) and llama3 scaling.
#pragma once

#include <torch/torch.h>

#include "kvscope/ModelConfig.hpp"

namespace kvscope::detail {

class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const ModelConfig& config);
  /// cos, sin: [B, s, d] for position ids [B, s].
  std::pair<torch::Tensor, torch::Tensor> cosSin(const torch::Tensor& positions) const;
  /// x: [B, h, s, d]; cos/sin [B, s, d].
  static torch::Tensor apply(const torch::Tensor& x, const torch::Tensor& cos,
                             const torch::Tensor& sin);
  const torch::Tensor& baseInvFreq() const { return invFreq_; }

 private:
  torch::Tensor invFreqFor(int64_t seqLen) const;
  RopeConfig rope_;
  int64_t dim_;
  int64_t maxPositions_;
  torch::Tensor invFreq_;  // [d/2] float32
};

}  // namespace kvscope::detail
