// Numerical tolerance by compute dtype, scaled by the magnitude of the compared values.
// Calibrated on tests/fixtures/hf/calibration/precision_noise.json (cached vs full
// recompute on a GPU, logits of magnitude ~7.5): float32 noise <= 3.5e-5 (relative
// 4.7e-6), float16 <= 3.9e-3 (5.2e-4), bfloat16 <= 2.0e-3 on the tiny models, larger on
// real ones. The relative bases sit about 10x above the calibrated noise (bfloat16: 8x
// float16's, as its epsilon is 8x larger) and far below the executed bugs of the method
// (wrong layer 3.70, wrong position 23.0 on logits of magnitude ~10).
#pragma once

#include <string>

namespace kvscope::detail {

class Tolerance {
 public:
  explicit Tolerance(const std::string& computeDtype, double scale = 1.0);
  /// Absolute tolerance for values whose magnitude is `maxAbs`.
  double forMagnitude(double maxAbs) const;
  double relative() const { return relative_; }
  const std::string& dtype() const { return dtype_; }
  static double relativeFor(const std::string& computeDtype);

 private:
  std::string dtype_;
  double relative_;
};

}  // namespace kvscope::detail
