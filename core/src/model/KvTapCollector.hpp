// Collects the k_proj / v_proj taps of batch row 0 of one forward: the records an uncached
// pass computes, per layer (the uncached engine's trace records, an audit hypothesis run).
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
    return name == "k_proj" || name == "v_proj" || (withLogits_ && name == "logits");
  }
  void onTensor(int64_t, const std::string& name, const torch::Tensor& t) override {
    if (name == "logits")
      logits = t.select(0, 0);
    else
      (name == "k_proj" ? keys : values).push_back(t.select(0, 0));
  }
  std::vector<torch::Tensor> keys, values;  // [layer][h, T, d]
  torch::Tensor logits;                     // [T, V] (withLogits)

 private:
  bool withLogits_;
};

}  // namespace kvscope::detail
