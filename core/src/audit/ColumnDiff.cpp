#include "audit/ColumnDiff.hpp"

#include <algorithm>
#include <cmath>

namespace kvscope::detail {

ColumnDiff columnDiff(const FloatTensor& rec, int64_t c, const FloatTensor& ref, int64_t p) {
  ColumnDiff out;
  if (ref.shape.size() != 3 || rec.shape.size() != 3 || ref.shape[0] != rec.shape[0] ||
      ref.shape[2] != rec.shape[2] || p < 0 || p >= ref.shape[1] || c < 0 || c >= rec.shape[1])
    return out;
  const int64_t h = rec.shape[0], t = rec.shape[1], d = rec.shape[2], T = ref.shape[1];
  double err = 0, mag = 0;
  for (int64_t hh = 0; hh < h; ++hh)
    for (int64_t j = 0; j < d; ++j) {
      const double x = rec.data[static_cast<size_t>((hh * t + c) * d + j)];
      const double y = ref.data[static_cast<size_t>((hh * T + p) * d + j)];
      err = std::max(err, std::fabs(x - y));
      if (std::isnan(x) != std::isnan(y)) err = std::numeric_limits<double>::infinity();
      mag = std::max(mag, std::fabs(y));
    }
  out.err = err;
  out.mag = mag;
  return out;
}

ColumnDiff kvColumnDiff(const FloatTensor& keys, const FloatTensor& values, int64_t c,
                        const FloatTensor& refKeys, const FloatTensor& refValues, int64_t p) {
  if (!keys.sameEntriesAs(values) || !refKeys.sameEntriesAs(refValues)) return ColumnDiff{};
  const ColumnDiff k = columnDiff(keys, c, refKeys, p), v = columnDiff(values, c, refValues, p);
  return ColumnDiff{std::max(k.err, v.err), std::max(k.mag, v.mag)};
}

}  // namespace kvscope::detail
