// Collects the k_proj / v_proj taps of batch row 0 of one forward: the records an uncached
// pass computes, per layer (the uncached engine's trace records, an audit hypothesis run), and
// the recurrent layers' states after it.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "model/TorchTapSink.hpp"

namespace kvscope::detail {

class KvTapCollector : public TorchTapSink {
 public:
  /// `withLogits`: the logits of row 0 too.
  explicit KvTapCollector(bool withLogits = false) : withLogits_(withLogits) {}
  bool wants(const std::string& name) const override {
    return name == "k_proj" || name == "v_proj" || (withLogits_ && name == "logits") || name == "conv_state" ||
           name == "recurrent_state";
  }
  void onTensor(int64_t layer, const std::string& name, const torch::Tensor& t) override {
    if (name == "logits") {
      logits = t.select(0, 0);
      return;
    }
    auto& v = name == "k_proj" ? keys : name == "v_proj" ? values : name == "conv_state" ? convStates : recurrentStates;
    if (v.size() <= static_cast<size_t>(layer)) v.resize(static_cast<size_t>(layer) + 1);
    v[static_cast<size_t>(layer)] = t.select(0, 0);
  }
  /// Of the forward's `layers` layers: undefined for a recurrent layer (no keys), and past the
  /// last layer that tapped.
  torch::Tensor keysOf(size_t layer) const { return layer < keys.size() ? keys[layer] : torch::Tensor(); }
  torch::Tensor valuesOf(size_t layer) const { return layer < values.size() ? values[layer] : torch::Tensor(); }
  std::vector<torch::Tensor> keys, values;  // [layer][h, T, d]; undefined: a recurrent layer
  std::vector<torch::Tensor> convStates, recurrentStates;  // [layer] after the forward; undefined: attention
  torch::Tensor logits;                     // [T, V] (withLogits)

 private:
  bool withLogits_;
};

}  // namespace kvscope::detail
