#include "audit/Tolerance.hpp"

#include <algorithm>

namespace kvscope::detail {

double Tolerance::relativeFor(const std::string& d) {
  if (d == "bfloat16" || d == "bf16" || d == "BF16") return 4e-2;
  if (d == "float16" || d == "fp16" || d == "F16" || d == "half") return 5e-3;
  return 5e-5;  // float32
}

Tolerance::Tolerance(const std::string& computeDtype, double scale)
    : dtype_(computeDtype.empty() ? "float32" : computeDtype), relative_(relativeFor(dtype_) * scale) {}

double Tolerance::forMagnitude(double maxAbs) const { return relative_ * std::max(1.0, maxAbs); }

}  // namespace kvscope::detail
