// Internal tap interface: the forward pass reports torch tensors by name (see
// kvscope/TensorSink.hpp for the names). FloatTensorSinkAdapter forwards to a public sink.
#pragma once

#include <torch/torch.h>

#include <string>

#include "kvscope/TensorSink.hpp"

namespace kvscope::detail {

class TorchTapSink {
 public:
  virtual ~TorchTapSink() = default;
  virtual bool wants(const std::string& name) const = 0;
  virtual void onTensor(int64_t layer, const std::string& name, const torch::Tensor& t) = 0;
};

/// Reports `t` as `name` of `layer` to `taps` when it wants that name (nullptr: nobody taps).
inline void tapTensor(TorchTapSink* taps, int64_t layer, const char* name, const torch::Tensor& t) {
  if (taps && taps->wants(name)) taps->onTensor(layer, name, t);
}

/// Copies a (contiguous, float32, CPU) tensor into a FloatTensor value.
FloatTensor toFloatTensor(const torch::Tensor& t);
/// Wraps a FloatTensor as a torch tensor (copies).
torch::Tensor fromFloatTensor(const FloatTensor& t);

class FloatTensorSinkAdapter : public TorchTapSink {
 public:
  explicit FloatTensorSinkAdapter(TensorSink& sink) : sink_(sink) {}
  bool wants(const std::string& name) const override { return sink_.wants(name); }
  void onTensor(int64_t layer, const std::string& name, const torch::Tensor& t) override {
    sink_.onTensor(layer, name, toFloatTensor(t));
  }

 private:
  TensorSink& sink_;
};

}  // namespace kvscope::detail
