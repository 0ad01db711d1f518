// Collects the experts a mixture of experts' router took in one forward (the "experts" tap,
// [B, s, K] per MoE layer) and hands every other tap to `inner`: what the engine records in
// a trace's ExpertChoices.
#pragma once

#include <torch/torch.h>

#include <map>

#include "kvscope/Trace.hpp"
#include "model/TorchTapSink.hpp"

namespace kvscope::detail {

class ExpertTapCollector : public TorchTapSink {
 public:
  explicit ExpertTapCollector(TorchTapSink* inner = nullptr) : inner_(inner) {}
  bool wants(const std::string& name) const override {
    return name == "experts" || (inner_ && inner_->wants(name));
  }
  void onTensor(int64_t layer, const std::string& name, const torch::Tensor& t) override {
    if (name == "experts")
      experts_[layer] = t.to(torch::kLong);
    else if (inner_)
      inner_->onTensor(layer, name, t);
  }
  /// Batch row `row`'s entries [first, first + count) over `layers` model layers (dense ones
  /// -1); empty when the forward routed nothing.
  ExpertChoices choices(int64_t row, int64_t first, int64_t count, int64_t layers) const {
    ExpertChoices out;
    if (experts_.empty()) return out;
    int64_t slots = 0;
    for (const auto& [l, t] : experts_) slots = std::max(slots, t.size(2));
    out.slots = slots;
    out.layers = layers;
    out.ids.assign(static_cast<size_t>(count * layers * slots), -1);
    for (const auto& [l, t] : experts_) {
      const auto rows = t.select(0, row).narrow(0, first, count).contiguous();
      const auto a = rows.accessor<int64_t, 2>();
      for (int64_t i = 0; i < count; ++i)
        for (int64_t k = 0; k < rows.size(1); ++k)
          out.ids[static_cast<size_t>((i * layers + l) * slots + k)] = a[i][k];
    }
    return out;
  }

 private:
  TorchTapSink* inner_;
  std::map<int64_t, torch::Tensor> experts_;  // layer -> [B, s, K]
};

}  // namespace kvscope::detail
