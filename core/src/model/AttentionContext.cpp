#include "model/AttentionContext.hpp"

namespace kvscope::detail {

int64_t AttentionContext::queryRows(int64_t B, int64_t heads, int64_t s, int64_t t, int64_t elements) {
  const int64_t perRow = std::max<int64_t>(1, B * heads * t);
  return std::max<int64_t>(1, std::min(s, elements / perRow));
}

torch::Tensor buildAllowedMask(const torch::Tensor& queryIdx, const torch::Tensor& keyIdx,
                               const torch::Tensor& keyValid, int64_t window, int64_t chunk,
                               const torch::Tensor& queryOrd, const torch::Tensor& keyOrd) {
  auto q = queryIdx.view({-1, 1});  // [s, 1]
  auto k = keyIdx.view({1, -1});    // [1, t]
  auto allowed = k.le(q);
  if (window > 0) allowed = allowed.logical_and(k.gt(q - window));
  // [B, 1, s, t]
  allowed = allowed.unsqueeze(0).unsqueeze(0).logical_and(keyValid.unsqueeze(1).unsqueeze(1));
  if (chunk > 0) {
    const auto same = torch::floor_divide(queryOrd, chunk).unsqueeze(2).eq(torch::floor_divide(keyOrd, chunk).unsqueeze(1));
    allowed = allowed.logical_and(same.unsqueeze(1));
  }
  return allowed;
}

torch::Tensor streamOrdinals(const torch::Tensor& valid) { return valid.to(torch::kLong).cumsum(1) - 1; }

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

torch::Tensor AttentionContext::droppedQueries(AttentionFeature feature, int64_t layer, int64_t B,
                                               int64_t s) const {
  std::vector<int64_t> rows(static_cast<size_t>(B), 0);
  bool any = false;
  for (int64_t b = 0; b < B; ++b) {
    if (!dropsFeature(feature, layer, b)) continue;
    rows[static_cast<size_t>(b)] = 1;
    any = true;
  }
  const auto l = static_cast<size_t>(layer);
  const auto it = droppedFrom_.find(feature);
  const int64_t from = it != droppedFrom_.end() && l < it->second.size() ? it->second[l] : -1;
  if (!any && (from < 0 || from >= s)) return {};
  auto mask = torch::tensor(rows, torch::kLong).to(torch::kBool).view({B, 1, 1, 1}).expand({B, 1, s, 1});
  if (from >= 0 && from < s)
    mask = mask.logical_or(torch::arange(s, torch::kLong).ge(from).view({1, 1, s, 1}));
  return mask;
}

void AttentionContext::setDroppedQueries(AttentionFeature feature, int64_t layer, int64_t fromQuery) {
  const auto l = static_cast<size_t>(layer);
  auto& from = droppedFrom_[feature];
  if (from.size() <= l) from.resize(l + 1, -1);
  from[l] = fromQuery;
}

KvView UncachedAttention::attend(int64_t layer, const torch::Tensor& kNew,
                                 const torch::Tensor& vNew) {
  const int64_t s = kNew.size(2);
  auto idx = torch::arange(s, torch::kLong);
  int64_t chunk = layerChunk(layer), window = windows_.at(static_cast<size_t>(layer));
  if (chunk > 0 && chunkAsWindow_.count(layer) > 0) {
    window = chunk;
    chunk = 0;
  }
  const torch::Tensor ord = chunk > 0 ? streamOrdinals(keyValid_) : torch::Tensor();
  return {kNew, vNew, buildAllowedMask(idx, idx, keyValid_, window, chunk, ord, ord)};
}

void UncachedAttention::roundRecords(int64_t layer, torch::Tensor& kNew, torch::Tensor& vNew) {
  if (!quantizer_ || !quantizer_->active()) return;
  kNew = quantizer_->roundTrip(kNew, layer, /*keys=*/true);
  vNew = quantizer_->roundTrip(vNew, layer, /*keys=*/false);
}

}  // namespace kvscope::detail
