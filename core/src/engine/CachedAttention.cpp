#include "engine/CachedAttention.hpp"

#include "kvscope/Error.hpp"

namespace kvscope::detail {

CachedAttention::CachedAttention(KvCache& cache, std::vector<RequestState*> group,
                                 std::vector<std::vector<uint8_t>> fedMask, const FaultPlan& faults,
                                 std::vector<int64_t> layerWindows, const KvQuantizer& quantizer)
    : cache_(cache),
      group_(std::move(group)),
      fedMask_(std::move(fedMask)),
      faults_(faults),
      windows_(std::move(layerWindows)),
      quantizer_(quantizer) {
  stashK_.resize(static_cast<size_t>(cache_.layers()));
  stashV_.resize(static_cast<size_t>(cache_.layers()));
  for (auto* r : group_) before_.push_back(r->lengths);
}

void CachedAttention::roundRecords(int64_t layer, torch::Tensor& kNew, torch::Tensor& vNew) {
  if (!quantizer_.active()) return;
  std::vector<torch::Tensor> ks, vs;
  for (int64_t b = 0; b < kNew.size(0); ++b) {
    const RequestState& r = *group_[static_cast<size_t>(b)];
    // kv_quantization: this row's records are dequantised with a wrong scale.
    const double factor = faults_.quantizationScaleFactor(r.id, r.step, layer);
    ks.push_back(quantizer_.roundTrip(kNew.select(0, b), layer, /*keys=*/true, factor));
    vs.push_back(quantizer_.roundTrip(vNew.select(0, b), layer, /*keys=*/false, factor));
  }
  kNew = torch::stack(ks, 0);
  vNew = torch::stack(vs, 0);
}

bool CachedAttention::dropsRopeScaling(int64_t layer, int64_t row) const {
  const RequestState& r = *group_.at(static_cast<size_t>(row));
  return faults_.ropeScalingDropped(r.id, r.step, layer);
}

int64_t CachedAttention::projectionSplits(int64_t layer, int64_t row) const {
  const RequestState& r = *group_.at(static_cast<size_t>(row));
  return faults_.projectionSplits(r.id, r.step, layer, r.batchMates);
}

KvView CachedAttention::attend(int64_t layer, const torch::Tensor& kNew, const torch::Tensor& vNew) {
  const auto L = static_cast<size_t>(layer);
  stashK_[L] = kNew;
  stashV_[L] = vNew;
  const int64_t B = kNew.size(0), s = kNew.size(2);
  int64_t newLength = -1;
  for (int64_t b = 0; b < B; ++b) {
    RequestState& r = *group_[static_cast<size_t>(b)];
    torch::Tensor k = kNew.select(0, b), v = vNew.select(0, b);
    // wrong_layer: this layer stores another layer's records of the same tokens.
    const int64_t source = faults_.wrongLayerSource(r.id, r.step, layer);
    if (source >= 0) {
      k = stashK_[static_cast<size_t>(source)].select(0, b);
      v = stashV_[static_cast<size_t>(source)].select(0, b);
    }
    // batch_row_mix: another member's records are written into this row.
    const int64_t from = faults_.batchRowSource(r.id, r.step, layer);
    if (from >= 0) {
      for (int64_t o = 0; o < B; ++o)
        if (group_[static_cast<size_t>(o)]->id == from) {
          k = kNew.select(0, o);
          v = vNew.select(0, o);
        }
    }
    int64_t at = r.lengths[L];
    const int copies = faults_.duplicateAppend(r.id, r.step, layer) ? 2 : 1;
    for (int c = 0; c < copies; ++c) {
      cache_.write(layer, r.slot, at, k, v);
      at += s;
    }
    r.lengths[L] = at;
    // The padding mask is per cache index; keep it as long as the longest layer.
    while (static_cast<int64_t>(r.valid.size()) < at) {
      const int64_t j = static_cast<int64_t>(r.valid.size());
      const int64_t inStep = (j - before_[static_cast<size_t>(b)][L]) % s;
      r.valid.push_back(fedMask_[static_cast<size_t>(b)][static_cast<size_t>(inStep)]);
    }
    if (newLength >= 0 && newLength != at)
      throw UsageError("batched requests have unequal cache lengths (" + std::to_string(newLength) +
                       " vs " + std::to_string(at) + ")");
    newLength = at;
  }
  // Keys/values to attend over: [B, h, newLength, d].
  torch::Tensor keys, values, valid;
  std::vector<torch::Tensor> ks, vs, ms;
  for (int64_t b = 0; b < B; ++b) {
    const RequestState& r = *group_[static_cast<size_t>(b)];
    ks.push_back(cache_.keysView(layer, r.slot, newLength));
    vs.push_back(cache_.valuesView(layer, r.slot, newLength));
    std::vector<uint8_t> m(r.valid.begin(), r.valid.begin() + newLength);
    ms.push_back(torch::tensor(std::vector<int64_t>(m.begin(), m.end()), torch::kLong).to(torch::kBool).view({1, -1}));
  }
  keys = B == 1 ? ks[0] : torch::cat(ks, 0);
  values = B == 1 ? vs[0] : torch::cat(vs, 0);
  valid = B == 1 ? ms[0] : torch::cat(ms, 0);
  // The queries are the last s entries written.
  auto queryIdx = torch::arange(newLength - s, newLength, torch::kLong);
  auto keyIdx = torch::arange(newLength, torch::kLong);
  int64_t window = windows_[L];
  if (window > 0) window += faults_.windowExtra(layer);
  return {keys, values, buildAllowedMask(queryIdx, keyIdx, valid, window)};
}

}  // namespace kvscope::detail
