#include "model/RotaryEmbedding.hpp"

#include <cmath>

namespace kvscope::detail {

torch::Tensor RotaryEmbedding::defaultInvFreq(double theta, int64_t dim) {
  // 1 / base ** (arange(0, dim, 2).float() / dim), in float32 as transformers does.
  auto exponent = torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat) / static_cast<float>(dim);
  return 1.0 / torch::pow(torch::tensor(static_cast<float>(theta)), exponent);
}

torch::Tensor RotaryEmbedding::scaled(const RopeConfig& rope, const torch::Tensor& invFreq) {
  if (rope.type == "linear") return invFreq / static_cast<float>(rope.factor);
  if (rope.type != "llama3") return invFreq;
  const double oldContext = static_cast<double>(rope.originalMaxPositions);
  const double lowWavelen = oldContext / rope.lowFreqFactor;
  const double highWavelen = oldContext / rope.highFreqFactor;
  auto wavelen = 2 * M_PI / invFreq;
  auto scaledFreq = torch::where(wavelen > lowWavelen, invFreq / rope.factor, invFreq);
  auto smooth =
      (oldContext / wavelen - rope.lowFreqFactor) / (rope.highFreqFactor - rope.lowFreqFactor);
  auto smoothed = (1 - smooth) * scaledFreq / rope.factor + smooth * scaledFreq;
  auto medium = wavelen.ge(highWavelen).logical_and(wavelen.le(lowWavelen));
  return torch::where(medium, smoothed, scaledFreq).to(torch::kFloat);
}

int64_t RotaryEmbedding::rotaryDim(const RopeConfig& rope, int64_t headDim) {
  // transformers: int(head_dim * partial_rotary_factor)
  return static_cast<int64_t>(static_cast<double>(headDim) * rope.partialRotaryFactor);
}

int64_t RotaryEmbedding::rotaryDim(const ModelConfig& config) {
  return rotaryDim(config.rope, config.headDim);
}

RotaryEmbedding::RotaryEmbedding(const RopeConfig& rope, int64_t headDim, int64_t maxPositions)
    : rope_(rope), dim_(rotaryDim(rope, headDim)), maxPositions_(maxPositions) {
  invFreq_ = scaled(rope_, defaultInvFreq(rope_.theta, dim_));
}

RotaryEmbedding::RotaryEmbedding(const ModelConfig& config)
    : RotaryEmbedding(config.rope, config.headDim, config.maxPositions) {}

RotaryEmbedding RotaryEmbedding::forLayer(const ModelConfig& config, int64_t layer) {
  return RotaryEmbedding(config.ropeFor(layer), config.headDim, config.maxPositions);
}

RotaryEmbedding RotaryEmbedding::wholeHead(const ModelConfig& config, int64_t layer) {
  RopeConfig rope = config.ropeFor(layer);
  rope.partialRotaryFactor = 1.0;
  return RotaryEmbedding(rope, config.headDim, config.maxPositions);
}

torch::Tensor RotaryEmbedding::invFreqFor(int64_t seqLen) const {
  if (rope_.type != "dynamic") return invFreq_;
  const int64_t original = rope_.originalMaxPositions > 0 ? rope_.originalMaxPositions : maxPositions_;
  if (seqLen <= original) return invFreq_;
  // transformers' _compute_dynamic_ntk_parameters, evaluated for the longest position fed.
  const double base =
      rope_.theta * std::pow(rope_.factor * static_cast<double>(seqLen) / static_cast<double>(original) -
                                 (rope_.factor - 1),
                             static_cast<double>(dim_) / static_cast<double>(dim_ - 2));
  return defaultInvFreq(base, dim_);
}

std::pair<torch::Tensor, torch::Tensor> RotaryEmbedding::rotation(const torch::Tensor& positions,
                                                                  const torch::Tensor& inv) {
  auto freqs = positions.to(torch::kFloat).unsqueeze(-1) * inv.view({1, 1, -1});  // [B, s, d/2]
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

std::pair<torch::Tensor, torch::Tensor> RotaryEmbedding::cosSin(
    const torch::Tensor& positions) const {
  const int64_t seqLen = positions.numel() ? positions.max().item<int64_t>() + 1 : 0;
  return rotation(positions, invFreqFor(seqLen));
}

std::pair<torch::Tensor, torch::Tensor> RotaryEmbedding::cosSinUnscaled(
    const torch::Tensor& positions) const {
  return rotation(positions, defaultInvFreq(rope_.theta, dim_));
}

torch::Tensor RotaryEmbedding::apply(const torch::Tensor& x, const torch::Tensor& cos,
                                     const torch::Tensor& sin) {
  const int64_t rotary = cos.size(-1);
  if (rotary < x.size(-1))  // partial rotary: the first `rotary` features turn, the rest pass
    return torch::cat({apply(x.narrow(-1, 0, rotary), cos, sin),
                       x.narrow(-1, rotary, x.size(-1) - rotary)},
                      -1);
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  auto rotated = torch::cat({-x2, x1}, -1);
  return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1);
}

}  // namespace kvscope::detail
