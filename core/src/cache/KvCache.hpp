// The cached engine's KV cache: one K and one V tensor per layer, axes (B, h, t, d_h),
// preallocated to `capacity` positions so appends along t never reallocate. Rows (B) are
// slots handed to requests; lengths and padding masks live in the request state. A recurrent
// (Gated DeltaNet) layer holds a state per slot instead: the conv's last inputs and the
// recurrent state, overwritten by each forward.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kvscope/ModelConfig.hpp"

namespace kvscope::detail {

class KvCache {
 public:
  /// `recurrentLayers`: per layer, true where the layer keeps a state, not K/V (makeRecurrent
  /// sizes it); such a layer gets no K/V storage.
  /// `valueDim`: a value row's width where it differs from a key row's (MLA); 0: headDim.
  KvCache(int64_t layers, int64_t slots, int64_t kvHeads, int64_t capacity, int64_t headDim,
          const std::vector<bool>& recurrentLayers = {}, int64_t valueDim = 0);

  /// The cache of a model of `config`: K/V rows of its KV heads and head size on the attention
  /// layers, the states of its recurrent layers (config.deltaNet).
  static std::unique_ptr<KvCache> forModel(const ModelConfig& config, int64_t slots, int64_t capacity);

  int64_t layers() const { return static_cast<int64_t>(keys_.size()); }
  int64_t slots() const { return slots_; }
  int64_t capacity() const { return capacity_; }

  /// Writes records [h, s, d] into (layer, slot) at cache indices [at, at + s).
  /// Throws UsageError when the capacity would be exceeded.
  void write(int64_t layer, int64_t slot, int64_t at, const torch::Tensor& k, const torch::Tensor& v);
  /// Views of (layer, slot) indices [0, length): [1, h, length, d] (no copy).
  torch::Tensor keysView(int64_t layer, int64_t slot, int64_t length) const;
  torch::Tensor valuesView(int64_t layer, int64_t slot, int64_t length) const;
  /// Copies of (layer, slot) indices [begin, end): [h, end - begin, d], contiguous.
  torch::Tensor copyKeys(int64_t layer, int64_t slot, int64_t begin, int64_t end) const;
  torch::Tensor copyValues(int64_t layer, int64_t slot, int64_t begin, int64_t end) const;
  /// Makes `layer` a recurrent layer: per slot a conv state `convShape` ([C, K]) and a recurrent
  /// state `stateShape` ([Hv, Dk, Dv]), float32 zeros.
  void makeRecurrent(int64_t layer, const std::vector<int64_t>& convShape, const std::vector<int64_t>& stateShape);
  bool isRecurrent(int64_t layer) const { return convStates_[static_cast<size_t>(layer)].defined(); }
  /// (layer, slot)'s states, views into the storage: [C, K] and [Hv, Dk, Dv].
  torch::Tensor convState(int64_t layer, int64_t slot) const { return convStates_[static_cast<size_t>(layer)].select(0, slot); }
  torch::Tensor recurrentState(int64_t layer, int64_t slot) const {
    return recurrentStates_[static_cast<size_t>(layer)].select(0, slot);
  }
  /// Sets (layer, slot)'s states to copies of `conv` [C, K] and `state` [Hv, Dk, Dv].
  void setRecurrentState(int64_t layer, int64_t slot, const torch::Tensor& conv, const torch::Tensor& state) {
    convState(layer, slot).copy_(conv);
    recurrentState(layer, slot).copy_(state);
  }
  /// XXH3-64 of (layer, slot)'s [h, length, d] region laid out contiguously (no copy).
  uint64_t checksumKeys(int64_t layer, int64_t slot, int64_t length) const;
  uint64_t checksumValues(int64_t layer, int64_t slot, int64_t length) const;

 private:
  static uint64_t checksum(const torch::Tensor& store, int64_t slot, int64_t length);
  int64_t slots_;
  int64_t capacity_;
  std::vector<torch::Tensor> keys_;    // [layers][slots, h_kv, capacity, d]
  std::vector<torch::Tensor> values_;  // [layers][slots, h_kv, capacity, d]
  std::vector<torch::Tensor> convStates_;       // [layers][slots, C, K]; undefined: not recurrent
  std::vector<torch::Tensor> recurrentStates_;  // [layers][slots, Hv, Dk, Dv]
};

}  // namespace kvscope::detail
