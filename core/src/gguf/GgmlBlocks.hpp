// ggml's tensor element types as GGUF stores them (ggml/src/ggml-common.h, ggml-quants.c):
// float types and the block-quantised ones KV Scope reads, each a run of blocks of
// `blockElements` values in `blockBytes` bytes along a row. Dequantisation follows ggml's
// dequantize_row_* exactly (the values llama.cpp computes with), one row at a time.
#pragma once

#include <cstdint>
#include <string>

namespace kvscope::detail {

struct GgmlType {
  uint32_t id;            // ggml_type
  const char* name;       // "Q4_K"
  int64_t blockElements;  // values per block (1 for float types)
  int64_t blockBytes;     // bytes per block
};

enum GgmlTypeId : uint32_t {
  kGgmlF32 = 0,
  kGgmlF16 = 1,
  kGgmlQ4_0 = 2,
  kGgmlQ4_1 = 3,
  kGgmlQ5_0 = 6,
  kGgmlQ5_1 = 7,
  kGgmlQ8_0 = 8,
  kGgmlQ2_K = 10,
  kGgmlQ3_K = 11,
  kGgmlQ4_K = 12,
  kGgmlQ5_K = 13,
  kGgmlQ6_K = 14,
  kGgmlBF16 = 30,
};

/// The type with this id when KV Scope reads it, else nullptr.
const GgmlType* ggmlType(uint32_t id);
/// The type whose blocks are `blockBytes` long among the block-quantised ones (each has its
/// own size), else nullptr.
const GgmlType* ggmlQuantTypeOfBlockBytes(int64_t blockBytes);
/// "Q4_K", or "type 23 (IQ4_XS)" for one KV Scope does not read.
std::string ggmlTypeName(uint32_t id);
/// "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K".
std::string ggmlReadableTypes();
/// Dequantises `n` values (a multiple of the block size) of type `t` at `src` into `out`.
void ggmlDequantize(const GgmlType& t, const uint8_t* src, int64_t n, float* out);

}  // namespace kvscope::detail
