#include "cache/KvQuantizer.hpp"

#include <cmath>

namespace kvscope::detail {

namespace {
// Rounds y (already divided by the scale) to the nearest fp8 value with `mantissaBits` and
// smallest normal exponent `minExponent`, ties to even, saturating at `maxValue`.
torch::Tensor roundToFp8(const torch::Tensor& y, int mantissaBits, int minExponent,
                         double maxValue) {
  auto a = y.abs();
  auto e = torch::floor(torch::log2(a.clamp_min(std::ldexp(1.0, minExponent))));
  auto ulp = torch::exp2(e - mantissaBits);
  auto q = torch::round(a / ulp) * ulp;
  return torch::sign(y) * q.clamp_max(maxValue);
}

// ggml's quantize_row_q8_0_ref / _q4_0_ref and their dequantisation on rows [..., d] in
// blocks of 32: the scale computed in float32 and stored as float16, codes rounded half
// away from zero (q8_0) or truncated after + 8.5 and clipped at 15 (q4_0).
torch::Tensor roundTripBlocks(const torch::Tensor& x, bool q4, double scaleFactor) {
  const int64_t B = KvQuantization::kBlockElements;
  auto sizes = x.sizes().vec();
  auto blocks = x.reshape({-1, B});
  torch::Tensor d;
  if (q4) {
    // the element of largest magnitude, with its sign (the first one on a tie)
    const auto idx = blocks.abs().argmax(-1, /*keepdim=*/true);
    d = blocks.gather(-1, idx) / -8.0;
  } else {
    d = blocks.abs().amax(-1, /*keepdim=*/true) / 127.0;
  }
  const auto inv = torch::where(d != 0, 1.0 / d, torch::zeros_like(d));
  const auto stored = d.to(torch::kHalf).to(torch::kFloat32);
  torch::Tensor codes;
  if (q4) {
    codes = torch::trunc(blocks * inv + 8.5).clamp_max(15.0) - 8.0;
  } else {
    const auto v = blocks * inv;
    codes = torch::sign(v) * torch::floor(v.abs() + 0.5);
  }
  return (codes * (stored * scaleFactor)).reshape(sizes);
}
}  // namespace

torch::Tensor KvQuantizer::roundTrip(const torch::Tensor& records, int64_t layer, bool keys,
                                     double scaleFactor) const {
  if (!active()) return records;
  const auto x = records.to(torch::kFloat32);
  if (format_.blockwise())
    return roundTripBlocks(x, format_.dtype == "q4_0", scaleFactor).to(records.scalar_type());
  const double maxCode = format_.maxCode();
  torch::Tensor scale;
  if (format_.scale == "per_layer") {
    const auto& s = keys ? format_.keyScales : format_.valueScales;
    scale = torch::full({1}, s.at(static_cast<size_t>(layer)), torch::kFloat32);
  } else {
    // One scale per (kv head, token) row: its absmax maps to the largest code.
    scale = x.abs().amax(-1, /*keepdim=*/true) / maxCode;
    scale = torch::where(scale > 0, scale, torch::ones_like(scale));
  }
  const auto y = x / scale;
  torch::Tensor q;
  if (format_.dtype == "int8")
    q = torch::round(y).clamp(-maxCode, maxCode);
  else if (format_.dtype == "fp8_e4m3")
    q = roundToFp8(y, 3, -6, maxCode);
  else
    q = roundToFp8(y, 2, -14, maxCode);
  return (q * (scale * scaleFactor)).to(records.scalar_type());
}

}  // namespace kvscope::detail
