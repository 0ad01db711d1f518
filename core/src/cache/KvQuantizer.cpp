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
}  // namespace

torch::Tensor KvQuantizer::roundTrip(const torch::Tensor& records, int64_t layer, bool keys,
                                     double scaleFactor) const {
  if (!active()) return records;
  const auto x = records.to(torch::kFloat32);
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
