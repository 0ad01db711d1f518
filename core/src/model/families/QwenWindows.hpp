// Qwen2 and Qwen3 switch their sliding windows on with `use_sliding_window`: then layers from
// `max_window_layers` on slide (transformers 4), or those `layer_types` names (transformers 5,
// which wins). The rule both Qwen families read their windows by.
#pragma once

#include "model/ConfigReader.hpp"
#include "model/families/HfDecoderKit.hpp"

namespace kvscope {

inline void readQwenWindows(const ConfigReader& r, ModelConfig& c) {
  const int64_t window = r.intOr("sliding_window", 0);
  if (!r.boolOr("use_sliding_window", false) || window <= 0) return;
  c.slidingWindow = window;
  const int64_t maxWindowLayers = r.intOr("max_window_layers", c.numLayers);
  for (int64_t i = 0; i < c.numLayers; ++i) c.slidingLayers[static_cast<size_t>(i)] = i >= maxWindowLayers;
  readLayerTypes(r, c, window);
}

}  // namespace kvscope
