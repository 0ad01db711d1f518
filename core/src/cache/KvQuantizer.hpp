// The built-in engine's quantised KV cache: records are quantised when written and the
// attention reads them dequantised (kvscope/KvQuantization.hpp has the rule and the budget).
#pragma once

#include <torch/torch.h>

#include "kvscope/KvQuantization.hpp"

namespace kvscope::detail {

class KvQuantizer {
 public:
  explicit KvQuantizer(KvQuantization format) : format_(std::move(format)) {}
  bool active() const { return format_.quantized(); }
  const KvQuantization& format() const { return format_; }
  /// Records [h, s, d] of `layer` (keys when `keys`) quantised and dequantised again: what a
  /// quantised cache hands the attention. `scaleFactor` != 1 dequantises with a wrong scale
  /// (the kv_quantization fault).
  torch::Tensor roundTrip(const torch::Tensor& records, int64_t layer, bool keys,
                          double scaleFactor = 1.0) const;

 private:
  KvQuantization format_;
};

}  // namespace kvscope::detail
