// One cache column against one reference column: max |x - ref| over heads and head dims
// (of one tensor, or keys and values together), and the reference's magnitude; a NaN on one
// side only counts as infinitely far. Tensors are [h, t, d].
#pragma once

#include <cstdint>
#include <limits>

#include "kvscope/FloatTensor.hpp"

namespace kvscope::detail {

struct ColumnDiff {
  double err = std::numeric_limits<double>::infinity();  // inf: shapes do not fit
  double mag = 0.0;
};

/// Column `c` of `rec` against column `p` of `ref`: one tensor, keys or values.
ColumnDiff columnDiff(const FloatTensor& rec, int64_t c, const FloatTensor& ref, int64_t p);

/// Column `c` of (keys, values) against column `p` of (refKeys, refValues).
ColumnDiff kvColumnDiff(const FloatTensor& keys, const FloatTensor& values, int64_t c,
                        const FloatTensor& refKeys, const FloatTensor& refValues, int64_t p);

}  // namespace kvscope::detail
