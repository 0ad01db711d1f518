#include "cache/KvCache.hpp"

#include <xxhash.h>

#include "kvscope/Error.hpp"

namespace kvscope::detail {

KvCache::KvCache(int64_t layers, int64_t slots, int64_t kvHeads, int64_t capacity, int64_t headDim,
                 const std::vector<bool>& recurrentLayers, int64_t valueDim)
    : slots_(slots), capacity_(capacity) {
  if (valueDim <= 0) valueDim = headDim;
  for (int64_t l = 0; l < layers; ++l) {
    const bool rows = static_cast<size_t>(l) >= recurrentLayers.size() || !recurrentLayers[static_cast<size_t>(l)];
    keys_.push_back(torch::zeros({slots, rows ? kvHeads : 0, capacity, rows ? headDim : 0}, torch::kFloat));
    values_.push_back(torch::zeros({slots, rows ? kvHeads : 0, capacity, rows ? valueDim : 0}, torch::kFloat));
  }
  convStates_.resize(static_cast<size_t>(layers));
  recurrentStates_.resize(static_cast<size_t>(layers));
}

std::unique_ptr<KvCache> KvCache::forModel(const ModelConfig& c, int64_t slots, int64_t capacity) {
  auto cache = std::make_unique<KvCache>(c.numLayers, slots, c.numKvHeads, capacity, c.headDim, c.deltaNet.layers,
                                         c.cacheValueDim());
  const DeltaNetConfig& dn = c.deltaNet;
  for (int64_t l = 0; l < c.numLayers; ++l)
    if (c.isRecurrentLayer(l))
      cache->makeRecurrent(l, {dn.convDim(), dn.convKernel}, {dn.valueHeads, dn.keyHeadDim, dn.valueHeadDim});
  return cache;
}

void KvCache::makeRecurrent(int64_t layer, const std::vector<int64_t>& convShape,
                            const std::vector<int64_t>& stateShape) {
  const auto L = static_cast<size_t>(layer);
  std::vector<int64_t> conv{slots_}, state{slots_};
  conv.insert(conv.end(), convShape.begin(), convShape.end());
  state.insert(state.end(), stateShape.begin(), stateShape.end());
  convStates_[L] = torch::zeros(conv, torch::kFloat);
  recurrentStates_[L] = torch::zeros(state, torch::kFloat);
}

void KvCache::write(int64_t layer, int64_t slot, int64_t at, const torch::Tensor& k,
                    const torch::Tensor& v) {
  const int64_t s = k.size(1);
  if (at + s > capacity_)
    throw UsageError("KV cache capacity of " + std::to_string(capacity_) + " entries exceeded");
  keys_[static_cast<size_t>(layer)].select(0, slot).narrow(1, at, s).copy_(k);
  values_[static_cast<size_t>(layer)].select(0, slot).narrow(1, at, s).copy_(v);
}

torch::Tensor KvCache::keysView(int64_t layer, int64_t slot, int64_t length) const {
  return keys_[static_cast<size_t>(layer)].narrow(0, slot, 1).narrow(2, 0, length);
}

torch::Tensor KvCache::valuesView(int64_t layer, int64_t slot, int64_t length) const {
  return values_[static_cast<size_t>(layer)].narrow(0, slot, 1).narrow(2, 0, length);
}

torch::Tensor KvCache::copyKeys(int64_t layer, int64_t slot, int64_t begin, int64_t end) const {
  return keys_[static_cast<size_t>(layer)].select(0, slot).narrow(1, begin, end - begin).contiguous().clone();
}

torch::Tensor KvCache::copyValues(int64_t layer, int64_t slot, int64_t begin, int64_t end) const {
  return values_[static_cast<size_t>(layer)].select(0, slot).narrow(1, begin, end - begin).contiguous().clone();
}

uint64_t KvCache::checksum(const torch::Tensor& store, int64_t slot, int64_t length) {
  // Equivalent to hashing the contiguous [h, length, d] block: each head's [length, d]
  // run is contiguous inside the preallocated [h, capacity, d] row.
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  auto row = store.select(0, slot);
  const int64_t h = row.size(0), d = row.size(2);
  const float* base = row.data_ptr<float>();
  for (int64_t i = 0; i < h; ++i)
    XXH3_64bits_update(st, base + i * row.stride(0), static_cast<size_t>(length * d) * sizeof(float));
  const uint64_t out = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return out;
}

uint64_t KvCache::checksumKeys(int64_t layer, int64_t slot, int64_t length) const {
  return checksum(keys_[static_cast<size_t>(layer)], slot, length);
}

uint64_t KvCache::checksumValues(int64_t layer, int64_t slot, int64_t length) const {
  return checksum(values_[static_cast<size_t>(layer)], slot, length);
}

}  // namespace kvscope::detail
