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

namespace {
// transformers' get_mscale in _compute_yarn_parameters.
double yarnMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// _compute_yarn_parameters' find_correction_dim.
double correctionDim(double rotations, int64_t dim, double base, double context) {
  return (static_cast<double>(dim) * std::log(context / (rotations * 2 * M_PI))) / (2 * std::log(base));
}
}  // namespace

double RotaryEmbedding::attentionFactorOf(const ModelConfig& config) {
  return config.usesRope() ? attentionFactorOf(config.rope) : 1.0;
}

double RotaryEmbedding::attentionFactorOf(const RopeConfig& rope) {
  if (rope.type != "yarn" && rope.type != "longrope") return 1.0;
  if (rope.attentionFactor > 0) return rope.attentionFactor;
  if (rope.type == "longrope") {
    if (rope.factor <= 1.0) return 1.0;
    return std::sqrt(1 + std::log(rope.factor) / std::log(static_cast<double>(rope.originalMaxPositions)));
  }
  if (rope.mscale != 0 && rope.mscaleAllDim != 0)
    return yarnMscale(rope.factor, rope.mscale) / yarnMscale(rope.factor, rope.mscaleAllDim);
  return yarnMscale(rope.factor, 1.0);
}

torch::Tensor RotaryEmbedding::yarnInvFreq(const RopeConfig& rope, int64_t dim) {
  // pos_freqs = base ** (arange(0, dim, 2).float() / dim) in float32, blended between the
  // extrapolated (1 / pos_freqs) and interpolated (1 / (factor * pos_freqs)) frequencies by a
  // linear ramp over the correction range of beta_fast .. beta_slow rotations.
  auto exponent = torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat) / static_cast<float>(dim);
  auto posFreqs = torch::pow(torch::tensor(static_cast<float>(rope.theta)), exponent);
  auto extrapolation = 1.0 / posFreqs;
  auto interpolation = 1.0 / (static_cast<float>(rope.factor) * posFreqs);
  const double context = static_cast<double>(rope.originalMaxPositions);
  double low = correctionDim(rope.betaFast, dim, rope.theta, context);
  double high = correctionDim(rope.betaSlow, dim, rope.theta, context);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  auto ramp = ((torch::arange(dim / 2, torch::kFloat) - static_cast<float>(low)) /
               static_cast<float>(high - low))
                  .clamp(0, 1);
  auto extrapolationFactor = 1 - ramp;
  return interpolation * (1 - extrapolationFactor) + extrapolation * extrapolationFactor;
}

torch::Tensor RotaryEmbedding::longRopeInvFreq(const RopeConfig& rope, int64_t dim, bool longFactors) {
  const auto& factors = longFactors ? rope.longFactor : rope.shortFactor;
  std::vector<float> f(factors.begin(), factors.end());
  auto ext = torch::tensor(f, torch::kFloat);
  // 1 / (ext_factors * base ** (arange(0, dim, 2).float() / dim))
  auto shape = torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat) / static_cast<float>(dim);
  return 1.0 / (ext * torch::pow(torch::tensor(static_cast<float>(rope.theta)), shape));
}

int64_t RotaryEmbedding::rotaryDim(const RopeConfig& rope, int64_t headDim) {
  // transformers: int(head_dim * partial_rotary_factor)
  return static_cast<int64_t>(static_cast<double>(headDim) * rope.partialRotaryFactor);
}

int64_t RotaryEmbedding::rotaryDim(const ModelConfig& config) {
  return rotaryDim(config.rope, config.rotaryHeadDim());
}

RotaryEmbedding::RotaryEmbedding(const RopeConfig& rope, int64_t headDim, int64_t maxPositions)
    : rope_(rope), dim_(rotaryDim(rope, headDim)), maxPositions_(maxPositions) {
  if (rope_.type == "yarn") {
    invFreq_ = yarnInvFreq(rope_, dim_);
  } else if (rope_.type == "longrope") {
    invFreq_ = longRopeInvFreq(rope_, dim_, false);
    longInvFreq_ = longRopeInvFreq(rope_, dim_, true);
  } else {
    invFreq_ = scaled(rope_, defaultInvFreq(rope_.theta, dim_));
  }
  if (!rope_.frequencyFactors.empty()) {  // GGUF rope_freqs, as ggml's rope divides theta
    if (static_cast<int64_t>(rope_.frequencyFactors.size()) != dim_ / 2)
      throw std::invalid_argument("rope frequency factors: " + std::to_string(rope_.frequencyFactors.size()) +
                                  " for " + std::to_string(dim_ / 2) + " frequencies");
    invFreq_ = invFreq_ / torch::tensor(rope_.frequencyFactors, torch::kDouble).to(invFreq_.scalar_type());
  }
  attentionFactor_ = attentionFactorOf(rope_);
}

bool RotaryEmbedding::usesLongFactors(int64_t seqLen) const {
  const int64_t switchAt = factorSwitch();
  return switchAt > 0 && seqLen > switchAt;
}

RotaryEmbedding::RotaryEmbedding(const ModelConfig& config)
    : RotaryEmbedding(config.rope, config.rotaryHeadDim(), config.maxPositions) {}

RotaryEmbedding RotaryEmbedding::forLayer(const ModelConfig& config, int64_t layer) {
  return RotaryEmbedding(config.ropeFor(layer), config.rotaryHeadDim(), config.maxPositions);
}

RotaryEmbedding RotaryEmbedding::wholeHead(const ModelConfig& config, int64_t layer) {
  RopeConfig rope = config.ropeFor(layer);
  rope.partialRotaryFactor = 1.0;
  return RotaryEmbedding(rope, config.rotaryHeadDim(), config.maxPositions);
}

torch::Tensor RotaryEmbedding::invFreqFor(int64_t seqLen) const {
  // longrope: the long factors once the forward's longest position passes the original
  // context (transformers' longrope_frequency_update, per forward call).
  if (usesLongFactors(seqLen)) return longInvFreq_;
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

std::pair<torch::Tensor, torch::Tensor> RotaryEmbedding::cosSin(const torch::Tensor& positions,
                                                                bool withAttentionFactor) const {
  const int64_t seqLen = positions.numel() ? positions.max().item<int64_t>() + 1 : 0;
  auto [cos, sin] = rotation(positions, invFreqFor(seqLen));
  // yarn / longrope: cos and sin times the attention factor (attention_scaling), in float32.
  if (withAttentionFactor && attentionFactor_ != 1.0) {
    cos = cos * static_cast<float>(attentionFactor_);
    sin = sin * static_cast<float>(attentionFactor_);
  }
  return {cos, sin};
}

std::pair<torch::Tensor, torch::Tensor> RotaryEmbedding::cosSinUnscaled(
    const torch::Tensor& positions) const {
  return rotation(positions, defaultInvFreq(rope_.theta, dim_));
}

torch::Tensor RotaryEmbedding::apply(const torch::Tensor& x, const torch::Tensor& cos,
                                     const torch::Tensor& sin, bool interleaved) {
  const int64_t rotary = cos.size(-1);
  if (rotary < x.size(-1))  // partial rotary: the first `rotary` features turn, the rest pass
    return torch::cat({apply(x.narrow(-1, 0, rotary), cos, sin, interleaved),
                       x.narrow(-1, rotary, x.size(-1) - rotary)},
                      -1);
  const int64_t half = x.size(-1) / 2;
  if (interleaved) {
    // cos/sin [c0 .. c(h-1), c0 .. c(h-1)] -> [c0, c0, c1, c1, ...]; rotate_half pairs (2i, 2i+1).
    auto c = cos.narrow(-1, 0, half).repeat_interleave(2, -1).unsqueeze(1);
    auto s = sin.narrow(-1, 0, half).repeat_interleave(2, -1).unsqueeze(1);
    auto even = x.slice(-1, 0, c10::nullopt, 2), odd = x.slice(-1, 1, c10::nullopt, 2);
    auto rotated = torch::stack({-odd, even}, -1).flatten(-2);
    return x * c + rotated * s;
  }
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  auto rotated = torch::cat({-x2, x1}, -1);
  return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1);
}

}  // namespace kvscope::detail
