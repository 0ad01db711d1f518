#include "model/AttentionContext.hpp"

namespace kvscope::detail {

torch::Tensor buildAllowedMask(const torch::Tensor& queryIdx, const torch::Tensor& keyIdx,
                               const torch::Tensor& keyValid, int64_t window) {
  auto q = queryIdx.view({-1, 1});  // [s, 1]
  auto k = keyIdx.view({1, -1});    // [1, t]
  auto allowed = k.le(q);
  if (window > 0) allowed = allowed.logical_and(k.gt(q - window));
  // [B, 1, s, t]
  return allowed.unsqueeze(0).unsqueeze(0).logical_and(keyValid.unsqueeze(1).unsqueeze(1));
}

const torch::Tensor& AttentionContext::layerPositions(int64_t layer) const {
  static const torch::Tensor none;
  const auto l = static_cast<size_t>(layer);
  return l < layerPositions_.size() ? layerPositions_[l] : none;
}

void AttentionContext::setLayerPositions(int64_t layer, torch::Tensor positions) {
  const auto l = static_cast<size_t>(layer);
  if (layerPositions_.size() <= l) layerPositions_.resize(l + 1);
  layerPositions_[l] = std::move(positions);
}

KvView UncachedAttention::attend(int64_t layer, const torch::Tensor& kNew,
                                 const torch::Tensor& vNew) {
  const int64_t s = kNew.size(2);
  auto idx = torch::arange(s, torch::kLong);
  return {kNew, vNew, buildAllowedMask(idx, idx, keyValid_, windows_.at(static_cast<size_t>(layer)))};
}

void UncachedAttention::roundRecords(int64_t layer, torch::Tensor& kNew, torch::Tensor& vNew) {
  if (!quantizer_ || !quantizer_->active()) return;
  kNew = quantizer_->roundTrip(kNew, layer, /*keys=*/true);
  vNew = quantizer_->roundTrip(vNew, layer, /*keys=*/false);
}

}  // namespace kvscope::detail
