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

/// The window keys a Qwen demo config.json holds: use_sliding_window, max_window_layers, the
/// window (transformers 5 stores it only when used) and, in the v5 style, layer_types.
inline void addQwenDemoWindows(nlohmann::json& c, const CheckpointSpec& s) {
  c["use_sliding_window"] = s.useSlidingWindow;
  c["max_window_layers"] = s.maxWindowLayers;
  const bool keepWindow = s.slidingWindow > 0 && (s.configStyle == ConfigStyle::V4 || s.useSlidingWindow);
  c["sliding_window"] = keepWindow ? nlohmann::json(s.slidingWindow) : nlohmann::json(nullptr);
  if (s.configStyle == ConfigStyle::V5) {
    nlohmann::json types = nlohmann::json::array();
    for (int64_t i = 0; i < s.numLayers; ++i)
      types.push_back(s.useSlidingWindow && s.slidingWindow > 0 && i >= s.maxWindowLayers
                          ? "sliding_attention"
                          : "full_attention");
    c["layer_types"] = types;
  }
}

inline void validateQwenDemoSpec(const CheckpointSpec& s) {
  validateHfDecoderDemoSpec(s);
  if (s.attentionBias)
    throw UsageError("checkpoint spec: attention_bias: only Llama has the attention_bias option");
  if (s.useSlidingWindow && s.slidingWindow <= 0)
    throw UsageError("checkpoint spec: sliding_window: use_sliding_window needs a positive window");
}

}  // namespace kvscope
