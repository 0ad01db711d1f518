// One cache column against one reference column: max |x - ref| over heads and head dims,
// keys and values together, and the reference's magnitude. Tensors are [h, t, d].
#pragma once

#include <cstdint>
#include <limits>

#include "kvscope/FloatTensor.hpp"

namespace kvscope::detail {

struct ColumnDiff {
  double err = std::numeric_limits<double>::infinity();  // inf: shapes do not fit
  double mag = 0.0;
};

/// Column `c` of (keys, values) against column `p` of (refKeys, refValues).
ColumnDiff kvColumnDiff(const FloatTensor& keys, const FloatTensor& values, int64_t c,
                        const FloatTensor& refKeys, const FloatTensor& refValues, int64_t p);

}  // namespace kvscope::detail
