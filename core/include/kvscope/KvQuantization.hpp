// A quantised KV cache (fp8 or int8, as vLLM's kv_cache_dtype, llama.cpp's q8_0 cache type or
// transformers' QuantizedCache keep it): what the cache's element type can represent, and so
// how far a correctly quantised record may sit from the exact projection. One rule, used by
// the engine that quantises, the trace that declares it and the audit that budgets for it.
//
// Scales, per the trace's `kv_cache.scale`:
//   per_token_head  dynamic: each record row (one token, one kv head) has its own scale,
//                   absmax(row) / max_code, so the row's largest element is exact; the scale
//                   of a recorded (dequantised) row is read back from the row itself.
//   per_layer       static: one key scale and one value scale per layer (k_scales,
//                   v_scales), as vLLM's calibrated fp8 caches.
//   per_block       ggml's q8_0 / q4_0 (llama.cpp's --cache-type-k/-v): a float16 scale
//                   per block of 32 elements along the row (head_dim a multiple of 32, so
//                   a block never spans two heads), read back from the stored blocks.
// The records a trace holds are the dequantised values the attention read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope {

struct KvQuantization {
  std::string dtype;                     // "" (not quantised) | int8 | fp8_e4m3 | fp8_e5m2
                                         // | q8_0 | q4_0
  std::string scale = "per_token_head";  // per_token_head | per_layer | per_block
  std::vector<double> keyScales;         // per_layer: one per layer
  std::vector<double> valueScales;

  bool quantized() const { return !dtype.empty(); }
  bool operator==(const KvQuantization& o) const;
  bool operator!=(const KvQuantization& o) const { return !(*this == o); }

  /// The largest code magnitude: 127 (int8, q8_0), 448 (fp8_e4m3), 57344 (fp8_e5m2), 8 (q4_0).
  double maxCode() const;
  /// ggml's block types (q8_0, q4_0): a scale per 32 elements, scale "per_block".
  bool blockwise() const;
  /// The elements one ggml block scale covers.
  static constexpr int64_t kBlockElements = 32;
  /// The relative precision of one element: the largest |rounding error| / |value| of a
  /// normal element (int8: half a step of the row's scale relative to its absmax, 1/254;
  /// fp8: half an ulp, 2^-4 for e4m3 and 2^-3 for e5m2).
  double relativeHalfStep() const;
  /// The largest rounding error a correct quantiser makes on a record of `layer` whose
  /// largest magnitude is `maxAbs` (the budget the audit gives every record of that layer).
  double halfStep(int64_t layer, double maxAbs) const;
  /// The quantisation step of that record (twice halfStep; what evidence counts errors in).
  double step(int64_t layer, double maxAbs) const { return 2.0 * halfStep(layer, maxAbs); }
  /// One line: "int8, per token and kv head" / "fp8_e4m3, static per layer".
  std::string describe() const;

  /// The element types a cache may declare (for --help and error messages).
  static const std::vector<std::string>& dtypes();
  /// Throws std::invalid_argument naming what is wrong (unknown dtype or scale, per_layer
  /// scales missing, of the wrong count, not positive and finite); `numLayers` for per_layer.
  void validate(int64_t numLayers) const;
};

}  // namespace kvscope
