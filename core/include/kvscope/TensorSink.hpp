// Engine taps: the forward pass reports named intermediate tensors per layer to whoever
// listens (the recorder, the CLI printer, a test). Names:
//   "embed"   [B, s, H]        input embeddings (GPT-2: token + position rows)
//   "k_proj"  [B, h_kv, s, d]  keys as cached (after RoPE where the architecture applies it)
//   "v_proj"  [B, h_kv, s, d]  values as cached
//   "attn_out"[B, s, H]        attention output after the output projection
//   "experts" [B, s, K]        a mixture-of-experts layer: the experts each token took (ids as
//                              floats, -1 for an unused slot)
//   "hidden"  [B, s, H]        the layer's output (residual stream)
//   "final"   [B, s, H]        after the final norm (layer = numLayers)
//   "logits"  [B, s, V]        (layer = numLayers)
#pragma once

#include <cstdint>
#include <string>

#include "kvscope/FloatTensor.hpp"

namespace kvscope {

class TensorSink {
 public:
  virtual ~TensorSink() = default;
  /// Return false for names this sink ignores (saves the copy).
  virtual bool wants(const std::string& name) const { return true; }
  virtual void onTensor(int64_t layer, const std::string& name, const FloatTensor& value) = 0;
};

}  // namespace kvscope
