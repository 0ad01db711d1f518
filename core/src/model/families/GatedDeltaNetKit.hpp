// What the families with Gated DeltaNet layers (Qwen3.5, Qwen3-Next) share: the config keys of
// their recurrent layers and attention (zero-centred norms, an output-gated q_proj, partial rotary
// RoPE), which layers are DeltaNets (layer_types), their weight names and their make-demo tensors.
#pragma once

#include <vector>

#include "kvscope/CheckpointSpec.hpp"
#include "kvscope/CheckpointWriter.hpp"
#include "kvscope/ModelConfig.hpp"
#include "model/families/ModelFamily.hpp"

namespace kvscope {

class ConfigReader;

/// The decoder keys (head_dim 256, `kvHeads` KV heads, partial rotary 0.25 by default), every RMSNorm
/// (1 + w), q/k norm, the attention output gate, attention_bias, linear_* sizes (InputError when
/// linear_num_value_heads is not a multiple of linear_num_key_heads) and layer_types
/// ("linear_attention", legacy "conv" / "mamba"; "full_attention", legacy "attention"; absent:
/// full every full_attention_interval-th layer, default 4). `family` names the family in errors.
/// `denseWidth` > 0: the intermediate_size of a class without one (every layer a mixture of experts).
void readGatedDeltaNetConfig(const ConfigReader& r, ModelConfig& c, const char* family, int64_t kvHeads = 4,
                             int64_t denseWidth = 0);

/// Qwen3.5's separate projections (linear_attn.in_proj_qkv / _z / _b / _a), or, `fused`,
/// Qwen3-Next's in_proj_qkvz and in_proj_ba; the conv, A_log, dt_bias, norm and out_proj.
void addDeltaNetWeightNames(WeightNames& w, bool fused);

/// The demo's DeltaNet sizes: the spec's linear heads, or its KV heads (key), heads (value),
/// head_dim (width).
struct DemoDeltaNet {
  int64_t keyHeads, valueHeads, width;
  static DemoDeltaNet of(const CheckpointSpec& s);
  bool fullLayer(const CheckpointSpec& s, int64_t layer) const;  // every fullAttentionInterval-th, else odd
};
/// The config keys of the demo's DeltaNets and layer_types.
void addDeltaNetDemoConfig(nlohmann::json& c, const CheckpointSpec& s);
/// `dense`'s tensors with the q_proj of full layers doubled (query | gate) and, on the DeltaNet
/// layers, the attention's tensors replaced by the DeltaNet's, named by `n`.
std::vector<CheckpointWriter::TensorPlan> deltaNetDemoTensors(const CheckpointSpec& s, const WeightNames& n,
                                                              std::vector<CheckpointWriter::TensorPlan> dense);
/// The demo spec without what the DeltaNet families have none of: attention bias, sliding windows.
void adjustDeltaNetDemoSpec(CheckpointSpec& s);
/// validateHfDecoderDemoSpec plus the DeltaNet's rules (no window, no bias, value heads a
/// multiple of key heads).
void validateDeltaNetDemoSpec(const CheckpointSpec& s);

}  // namespace kvscope
