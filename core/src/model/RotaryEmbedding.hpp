// Rotary position embedding with transformers' inverse-frequency rules: default, linear,
// dynamic (NTK), llama3, yarn and longrope scaling (the last two with their attention factor).
#pragma once

#include <torch/torch.h>

#include "kvscope/ModelConfig.hpp"

namespace kvscope::detail {

class RotaryEmbedding {
 public:
  /// The RoPE of `config`'s full-attention layers (config.rope).
  explicit RotaryEmbedding(const ModelConfig& config);
  /// `rope` over heads of `headDim` features.
  RotaryEmbedding(const RopeConfig& rope, int64_t headDim, int64_t maxPositions);
  /// The RoPE `layer` rotates with (config.ropeFor(layer)).
  static RotaryEmbedding forLayer(const ModelConfig& config, int64_t layer);
  /// cos, sin: [B, s, r] (r: rotaryDim) for position ids [B, s], times the attention factor
  /// (yarn, longrope) unless `withAttentionFactor` is false (what a path that drops it turns
  /// with: the yarn_attention_factor fault).
  std::pair<torch::Tensor, torch::Tensor> cosSin(const torch::Tensor& positions,
                                                 bool withAttentionFactor = true) const;
  /// The factor cos and sin are multiplied by (transformers' attention_scaling): yarn's
  /// mscale, longrope's sqrt(1 + ln(factor) / ln(original)); 1 for the other types.
  double attentionFactor() const { return attentionFactor_; }
  static double attentionFactorOf(const RopeConfig& rope);
  /// The model's: its RoPE's, 1 for a model without RoPE.
  static double attentionFactorOf(const ModelConfig& config);
  /// longrope: whether a forward whose longest sequence is `seqLen` turns with long_factor.
  bool usesLongFactors(int64_t seqLen) const;
  /// longrope: the sequence length up to which a forward turns with the short factors (the
  /// original context); 0 for RoPEs whose frequencies do not switch.
  int64_t factorSwitch() const { return factorSwitchOf(rope_); }
  /// The same rule for `rope` (the engine's refusal and the audit's report ask it too).
  static int64_t factorSwitchOf(const RopeConfig& rope) {
    return rope.type == "longrope" ? rope.originalMaxPositions : 0;
  }
  /// transformers' _compute_yarn_parameters inverse frequencies over `dim` rotary features.
  static torch::Tensor yarnInvFreq(const RopeConfig& rope, int64_t dim);
  /// transformers' _compute_longrope_parameters: short or long factors.
  static torch::Tensor longRopeInvFreq(const RopeConfig& rope, int64_t dim, bool longFactors);
  /// The same with the unscaled (default) inverse frequencies of rope_theta: what a path
  /// that drops the checkpoint's rope_scaling rotates with (the rope_scaling fault).
  std::pair<torch::Tensor, torch::Tensor> cosSinUnscaled(const torch::Tensor& positions) const;
  /// The rotated features of a head: int(head_dim * partial_rotary_factor).
  static int64_t rotaryDim(const ModelConfig& config);
  static int64_t rotaryDim(const RopeConfig& rope, int64_t headDim);
  /// x: [B, h, s, d]; cos/sin [B, s, r] with r <= d: the first r features of each head turn
  /// (half-split pairs within them), the others pass unchanged (partial rotary).
  /// `interleaved`: pairs (2i, 2i + 1) of the rotary features turn by frequency i (GLM-4's
  /// rotate_half over even/odd features, cos/sin's first r/2 entries repeated twice).
  static torch::Tensor apply(const torch::Tensor& x, const torch::Tensor& cos,
                             const torch::Tensor& sin, bool interleaved = false);
  const torch::Tensor& baseInvFreq() const { return invFreq_; }
  /// 1 / theta ** (arange(0, dim, 2) / dim) in float32, as transformers computes it.
  static torch::Tensor defaultInvFreq(double theta, int64_t dim);
  /// `invFreq` [dim/2] with `rope`'s linear or llama3 rule applied once (default and
  /// dynamic: unchanged; dynamic scales with the sequence length, see cosSin).
  static torch::Tensor scaled(const RopeConfig& rope, const torch::Tensor& invFreq);
  /// cos, sin [B, s, 2k] of positions [B, s] turned by the frequencies invFreq [k] (the
  /// half-split layout: feature i pairs with i + k).
  static std::pair<torch::Tensor, torch::Tensor> rotation(const torch::Tensor& positions,
                                                          const torch::Tensor& invFreq);
  /// The RoPE of `layer` over the whole head (partial_rotary_factor 1): what a path that
  /// ignores partial rotary turns (the partial_rotary fault).
  static RotaryEmbedding wholeHead(const ModelConfig& config, int64_t layer);

 private:
  torch::Tensor invFreqFor(int64_t seqLen) const;
  RopeConfig rope_;
  int64_t dim_;
  int64_t maxPositions_;
  torch::Tensor invFreq_;      // [d/2] float32 (longrope: the short factors')
  torch::Tensor longInvFreq_;  // [d/2] float32, longrope's long factors
  double attentionFactor_ = 1.0;
};

}  // namespace kvscope::detail
