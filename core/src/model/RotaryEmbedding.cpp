#include "model/RotaryEmbedding.hpp"

#include <cmath>

namespace kvscope::detail {

namespace {
torch::Tensor defaultInvFreq(double base, int64_t dim) {
  // 1 / base ** (arange(0, dim, 2).float() / dim), in float32 as transformers does.
  auto exponent = torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat) / static_cast<float>(dim);
  return 1.0 / torch::pow(torch::tensor(static_cast<float>(base)), exponent);
}
}  // namespace

RotaryEmbedding::RotaryEmbedding(const ModelConfig& config)
    : rope_(config.rope), dim_(config.headDim), maxPositions_(config.maxPositions) {
  invFreq_ = defaultInvFreq(rope_.theta, dim_);
  if (rope_.type == "linear") {
    invFreq_ = invFreq_ / static_cast<float>(rope_.factor);
  } else if (rope_.type == "llama3") {
    const double oldContext = static_cast<double>(rope_.originalMaxPositions);
    const double lowWavelen = oldContext / rope_.lowFreqFactor;
    const double highWavelen = oldContext / rope_.highFreqFactor;
    auto wavelen = 2 * M_PI / invFreq_;
    auto scaled = torch::where(wavelen > lowWavelen, invFreq_ / rope_.factor, invFreq_);
    auto smooth = (oldContext / wavelen - rope_.lowFreqFactor) /
                  (rope_.highFreqFactor - rope_.lowFreqFactor);
    auto smoothed = (1 - smooth) * scaled / rope_.factor + smooth * scaled;
    auto medium = wavelen.ge(highWavelen).logical_and(wavelen.le(lowWavelen));
    invFreq_ = torch::where(medium, smoothed, scaled).to(torch::kFloat);
  }
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

std::pair<torch::Tensor, torch::Tensor> RotaryEmbedding::cosSin(const torch::Tensor& positions) const {
  const int64_t seqLen = positions.numel() ? positions.max().item<int64_t>() + 1 : 0;
  auto inv = invFreqFor(seqLen);
  auto freqs = positions.to(torch::kFloat).unsqueeze(-1) * inv.view({1, 1, -1});  // [B, s, d/2]
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

torch::Tensor RotaryEmbedding::apply(const torch::Tensor& x, const torch::Tensor& cos,
                                     const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  auto rotated = torch::cat({-x2, x1}, -1);
  return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1);
}

}  // namespace kvscope::detail
