#include "audit/ColumnDiff.hpp"

#include <algorithm>
#include <cmath>

namespace kvscope::detail {

ColumnDiff kvColumnDiff(const FloatTensor& keys, const FloatTensor& values, int64_t c,
                        const FloatTensor& refKeys, const FloatTensor& refValues, int64_t p) {
  ColumnDiff out;
  if (refKeys.shape.size() != 3 || keys.shape.size() != 3 || values.shape != keys.shape ||
      refValues.shape != refKeys.shape || refKeys.shape[0] != keys.shape[0] ||
      refKeys.shape[2] != keys.shape[2] || p < 0 || p >= refKeys.shape[1] || c < 0 ||
      c >= keys.shape[1])
    return out;
  const int64_t h = keys.shape[0], t = keys.shape[1], d = keys.shape[2], T = refKeys.shape[1];
  double err = 0, mag = 0;
  for (int64_t hh = 0; hh < h; ++hh)
    for (int64_t j = 0; j < d; ++j) {
      const auto at = static_cast<size_t>((hh * t + c) * d + j),
                 ref = static_cast<size_t>((hh * T + p) * d + j);
      const double rk = refKeys.data[ref], rv = refValues.data[ref];
      const double x = keys.data[at], y = values.data[at];
      err = std::max({err, std::fabs(x - rk), std::fabs(y - rv)});
      if (std::isnan(x) != std::isnan(rk) || std::isnan(y) != std::isnan(rv))
        err = std::numeric_limits<double>::infinity();
      mag = std::max({mag, std::fabs(rk), std::fabs(rv)});
    }
  out.err = err;
  out.mag = mag;
  return out;
}

}  // namespace kvscope::detail
