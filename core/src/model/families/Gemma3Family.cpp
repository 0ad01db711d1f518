// Gemma 3 text (`gemma3_text`): the Gemma block (GemmaKit.hpp) with a per-head (1 + w) RMSNorm
// of queries and keys before RoPE (q_norm, k_norm), and two RoPEs: the full-attention layers
// rotate with rope_theta (default 1e6) and rope_scaling, the sliding ones with their own base
// (rope_local_base_freq, default 10000, unscaled); transformers 5 keys both in rope_parameters
// by layer type. Layers slide per layer_types, else every layer but each
// sliding_window_pattern-th (default 6). No soft-caps unless the config names them.
// transformers: models/gemma3/modeling_gemma3.py (Gemma3TextConfig, Gemma3RotaryEmbedding).
#include <algorithm>

#include "kvscope/Error.hpp"
#include "model/ConfigReader.hpp"
#include "model/families/Families.hpp"
#include "model/families/GemmaKit.hpp"

namespace kvscope {

namespace {

class Gemma3Family final : public ModelFamily {
 public:
  Architecture architecture() const override { return Architecture::Gemma3; }
  std::string modelType() const override { return "gemma3_text"; }
  const char* layerCountKey() const override { return "num_hidden_layers"; }

  void readConfig(const ConfigReader& r, ModelConfig& c) const override {
    if (r.boolOr("use_bidirectional_attention", false))
      throw InputError(r.file(), "use_bidirectional_attention",
                       "true: every layer attends both ways (an encoder such as EmbeddingGemma); "
                       "KV Scope audits causal generation");
    readGemmaConfig(r, c, GemmaDefaults{1e6, 0.0, 0.0});
    c.qkNorm = true;
    const int64_t window = readGemmaWindow(r);
    if (!readLayerTypes(r, c, window)) {
      const int64_t pattern = r.intOr("sliding_window_pattern", 6);
      if (pattern < 1) throw InputError(r.file(), "sliding_window_pattern", "must be >= 1");
      c.slidingWindow = window;
      for (int64_t i = 0; i < c.numLayers; ++i)
        c.slidingLayers[static_cast<size_t>(i)] = (i + 1) % pattern != 0;
    }
    const bool anySliding = std::find(c.slidingLayers.begin(), c.slidingLayers.end(), true) != c.slidingLayers.end();
    if (!anySliding) return;
    if (window == 0)
      throw InputError(r.file(), "sliding_window",
                       "null or 0, but layer_types (or sliding_window_pattern) makes layers "
                       "sliding_attention: a sliding layer needs a window");
    // The local RoPE: rope_local_base_freq (transformers 4) or rope_parameters'
    // sliding_attention entry (5); default RoPE otherwise, never the global scaling.
    RopeConfig local;
    local.theta = 10000.0;
    local.partialRotaryFactor = c.rope.partialRotaryFactor;
    local = readRopeTheta(r, "rope_local_base_freq", local);
    if (auto keyed = readLayerTypeRope(r, "sliding_attention", local)) local = *keyed;
    if (local.partialRotaryFactor != c.rope.partialRotaryFactor)
      throw InputError(r.file(), "rope_parameters.sliding_attention.partial_rotary_factor",
                       "differs from the full-attention layers'; one rotary width per model is supported");
    c.slidingRope = local;
  }

  const WeightNames& weightNames() const override { return gemmaWeightNames(); }

  nlohmann::json demoConfig(const CheckpointSpec& s) const override {
    nlohmann::json c = gemmaDemoConfig(s, "Gemma3ForCausalLM", "gemma3_text");
    // The sliding layers' RoPE: base 10000, unscaled, in the spec's config style.
    if (s.configStyle == ConfigStyle::V4) {
      c["rope_local_base_freq"] = 10000.0;
    } else {
      nlohmann::json full = c["rope_parameters"];
      c["rope_parameters"] = {{"full_attention", full},
                              {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
    }
    // Every third layer is global (Gemma 3's 5:1 pattern, shortened for small demos), the
    // others slide over --sliding-window or Gemma's 4096.
    nlohmann::json types = nlohmann::json::array();
    for (int64_t i = 0; i < s.numLayers; ++i)
      types.push_back((i + 1) % 3 != 0 ? "sliding_attention" : "full_attention");
    c["layer_types"] = types;
    return c;
  }

  std::vector<CheckpointWriter::TensorPlan> demoTensors(const CheckpointSpec& s) const override {
    return hfDecoderDemoTensors(s, weightNames(), false, false, true, false);
  }

  void adjustDemoSpec(CheckpointSpec& s) const override { adjustGemmaDemoSpec(s); }
  void validateDemoSpec(const CheckpointSpec& s) const override { validateGemmaDemoSpec(s); }
};

}  // namespace

const ModelFamily& gemma3Family() {
  static const Gemma3Family f;
  return f;
}

}  // namespace kvscope
