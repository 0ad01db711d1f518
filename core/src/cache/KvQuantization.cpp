#include "kvscope/KvQuantization.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kvscope {

namespace {
struct ElementType {
  const char* name;
  double maxCode;
  double relativeHalfStep;   // of a normal element
  double subnormalHalfStep;  // absolute, in units of the scale (0: integer codes)
  bool blocks;               // ggml's block types: a float16 scale per 32 elements of a row
};

// e4m3 (the "fn" variant engines use): 3 mantissa bits, max 448, smallest subnormal 2^-9;
// e5m2: 2 mantissa bits, max 57344, smallest subnormal 2^-16.
// q8_0, q4_0: llama.cpp's cache types (ggml-quants.c quantize_row_q8_0_ref / _q4_0_ref), a
// float16 scale per block of 32 elements, relative to the block's (so the row's) absmax:
// q8_0 rounds to half a step of absmax / 127; q4_0 maps the block's signed extreme to -8
// and clips the other side at +7, a whole step of absmax / 8 at worst. Both add the
// scale's float16 rounding, at most 2^-11 of absmax on the largest code.
const ElementType kTypes[] = {
    {"int8", 127.0, 0.5 / 127.0, 0.0, false},
    {"fp8_e4m3", 448.0, 0.0625, 0.0009765625, false},
    {"fp8_e5m2", 57344.0, 0.125, 7.62939453125e-06, false},
    {"q8_0", 127.0, 0.5 / 127.0 + 1.0 / 2048.0, 0.0, true},
    {"q4_0", 8.0, 1.0 / 8.0 + 1.0 / 2048.0, 0.0, true},
};

const ElementType& typeOf(const std::string& dtype) {
  for (const auto& t : kTypes)
    if (dtype == t.name) return t;
  throw std::invalid_argument("unknown cache dtype '" + dtype + "'");
}
}  // namespace

bool KvQuantization::operator==(const KvQuantization& o) const {
  return dtype == o.dtype && (!quantized() || (scale == o.scale && keyScales == o.keyScales &&
                                               valueScales == o.valueScales));
}

const std::vector<std::string>& KvQuantization::dtypes() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& t : kTypes) v.emplace_back(t.name);
    return v;
  }();
  return names;
}

double KvQuantization::maxCode() const { return typeOf(dtype).maxCode; }

double KvQuantization::relativeHalfStep() const {
  if (!quantized()) return 0.0;
  const ElementType& t = typeOf(dtype);
  // int8 with a per-row scale: half a step of absmax / 127, relative to the row's absmax.
  return t.relativeHalfStep;
}

double KvQuantization::halfStep(int64_t layer, double maxAbs) const {
  if (!quantized()) return 0.0;
  const ElementType& t = typeOf(dtype);
  const double m = std::fabs(maxAbs);
  if (scale == "per_layer") {
    const auto l = static_cast<size_t>(std::max<int64_t>(layer, 0));
    const double s = std::max(l < keyScales.size() ? keyScales[l] : 0.0,
                              l < valueScales.size() ? valueScales[l] : 0.0);
    if (t.subnormalHalfStep == 0.0) return 0.5 * s;  // integer codes: half a step everywhere
    return std::max(m * t.relativeHalfStep, s * t.subnormalHalfStep);
  }
  // per_token_head: the row's scale makes its largest element exact; every other element
  // rounds by at most half a step (int8) or half an ulp at its own exponent (fp8), and no
  // row in the record is larger than the record's largest element.
  return m * t.relativeHalfStep;
}

bool KvQuantization::blockwise() const { return quantized() && typeOf(dtype).blocks; }

std::string KvQuantization::describe() const {
  if (!quantized()) return "not quantised";
  if (scale == "per_block") return dtype + ", a float16 scale per block of 32 elements (ggml)";
  return dtype +
         (scale == "per_layer" ? ", static scales per layer" : ", a scale per token and kv head");
}

void KvQuantization::validate(int64_t numLayers) const {
  if (!quantized()) return;
  const bool blocks = typeOf(dtype).blocks;
  if (blocks != (scale == "per_block"))
    throw std::invalid_argument(blocks ? dtype + " stores a scale per block: scale must be per_block"
                                       : "scale per_block is ggml's (q8_0, q4_0), not " + dtype + "'s");
  if (blocks) {
    if (!keyScales.empty() || !valueScales.empty())
      throw std::invalid_argument("per_block scales are read from the records: k_scales and v_scales must be absent");
    return;
  }
  if (scale == "per_token_head") {
    if (!keyScales.empty() || !valueScales.empty())
      throw std::invalid_argument(
          "per_token_head scales are read from the records: k_scales and v_scales must be absent");
    return;
  }
  if (scale != "per_layer")
    throw std::invalid_argument("unknown scale '" + scale +
                                "' (expected per_token_head, per_layer or per_block)");
  for (const auto* v : {&keyScales, &valueScales}) {
    const char* name = v == &keyScales ? "k_scales" : "v_scales";
    if (static_cast<int64_t>(v->size()) != numLayers)
      throw std::invalid_argument(std::string(name) + " holds " + std::to_string(v->size()) +
                                  " scales, expected one per layer (" + std::to_string(numLayers) +
                                  ")");
    for (double s : *v)
      if (!(s > 0.0) || !std::isfinite(s))
        throw std::invalid_argument(std::string(name) + " must be positive and finite");
  }
}

}  // namespace kvscope
