// Rotary position embedding with transformers' inverse-frequency rules: default, linear,
// dynamic (NTK) and llama3 scaling.
#pragma once

#include <torch/torch.h>

#include "kvscope/ModelConfig.hpp"

namespace kvscope::detail {

class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const ModelConfig& config);
  /// cos, sin: [B, s, r] (r: rotaryDim) for position ids [B, s].
  std::pair<torch::Tensor, torch::Tensor> cosSin(const torch::Tensor& positions) const;
  /// The same with the unscaled (default) inverse frequencies of rope_theta: what a path
  /// that drops the checkpoint's rope_scaling rotates with (the rope_scaling fault).
  std::pair<torch::Tensor, torch::Tensor> cosSinUnscaled(const torch::Tensor& positions) const;
  /// The rotated features of a head: int(head_dim * partial_rotary_factor).
  static int64_t rotaryDim(const ModelConfig& config);
  /// x: [B, h, s, d]; cos/sin [B, s, r] with r <= d: the first r features of each head turn
  /// (half-split pairs within them), the others pass unchanged (partial rotary).
  static torch::Tensor apply(const torch::Tensor& x, const torch::Tensor& cos,
                             const torch::Tensor& sin);
  const torch::Tensor& baseInvFreq() const { return invFreq_; }
  /// 1 / theta ** (arange(0, dim, 2) / dim) in float32, as transformers computes it.
  static torch::Tensor defaultInvFreq(double theta, int64_t dim);
  /// `invFreq` [dim/2] with `rope`'s linear or llama3 rule applied once (default and
  /// dynamic: unchanged; dynamic scales with the sequence length, see cosSin).
  static torch::Tensor scaled(const RopeConfig& rope, const torch::Tensor& invFreq);

 private:
  torch::Tensor invFreqFor(int64_t seqLen) const;
  static std::pair<torch::Tensor, torch::Tensor> rotation(const torch::Tensor& positions,
                                                          const torch::Tensor& invFreq);
  RopeConfig rope_;
  int64_t dim_;
  int64_t maxPositions_;
  torch::Tensor invFreq_;  // [d/2] float32
};

}  // namespace kvscope::detail
