// Decode-sized products against a block-quantised weight: out[m * N + n] = x[m] . row n of w,
// for the rows n in [n0, n1) and M input rows. Each weight row is dequantised once, as ggml
// does (GgmlBlocks.hpp), into a buffer that stays in the core's cache, then dotted with the M
// inputs (with the instructions util/KernelIsa.hpp picks): the weights are read once, and never
// written out as float32.
#pragma once

#include <cstdint>

#include "gguf/GgmlBlocks.hpp"

namespace kvscope::detail {

void ggmlDotRows(const GgmlType& t, const uint8_t* w, int64_t rowBytes, int64_t K, const float* x, int64_t M,
                 int64_t n0, int64_t n1, float* out, int64_t N);

}  // namespace kvscope::detail
