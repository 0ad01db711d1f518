#include "model/Mxfp4.hpp"

namespace kvscope::detail {

torch::Tensor dequantizeMxfp4(const torch::Tensor& blocks, const torch::Tensor& scales, int64_t e) {
  // The e2m1 values by nibble: sign bit 3, exponent bits 2-1, mantissa bit 0.
  static const torch::Tensor lut = torch::tensor(
      {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f});
  const torch::Tensor b = blocks[e].to(torch::kLong);  // [out, G, 16]
  const int64_t out = b.size(0), groups = b.size(1);
  const torch::Tensor lo = lut.index({b.bitwise_and(0x0F)}), hi = lut.index({b.bitwise_right_shift(4)});
  torch::Tensor values = torch::stack({lo, hi}, -1).reshape({out, groups, 32});  // element 2j low, 2j+1 high
  const torch::Tensor exponent = scales[e].to(torch::kInt) - 127;                  // [out, G]
  values = torch::ldexp(values, exponent.unsqueeze(-1));
  return values.reshape({out, groups * 32});
}

}  // namespace kvscope::detail
