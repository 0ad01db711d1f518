#include "engine/CachedAttention.hpp"

#include <algorithm>

#include "kvscope/Error.hpp"

namespace kvscope::detail {

CachedAttention::CachedAttention(KvCache& cache, std::vector<RequestState*> group,
                                 std::vector<std::vector<uint8_t>> fedMask,
                                 std::vector<std::vector<int64_t>> fedPositions,
                                 const FaultPlan& faults, std::vector<int64_t> layerWindows,
                                 const KvQuantizer& quantizer)
    : cache_(cache),
      group_(std::move(group)),
      fedMask_(std::move(fedMask)),
      fedPositions_(std::move(fedPositions)),
      faults_(faults),
      windows_(std::move(layerWindows)),
      quantizer_(quantizer) {
  stashK_.resize(static_cast<size_t>(cache_.layers()));
  stashV_.resize(static_cast<size_t>(cache_.layers()));
  for (auto* r : group_) before_.push_back(r->lengths);
  ringRecords_.resize(group_.size());
  for (auto& records : ringRecords_) {
    records.keys.resize(static_cast<size_t>(cache_.layers()));
    records.values.resize(static_cast<size_t>(cache_.layers()));
  }
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

bool CachedAttention::normsAfterRope(int64_t layer, int64_t row) const {
  const RequestState& r = *group_.at(static_cast<size_t>(row));
  return faults_.qkNormAfterRope(r.id, r.step, layer);
}

bool CachedAttention::flipsRope(int64_t layer, int64_t row) const {
  const RequestState& r = *group_.at(static_cast<size_t>(row));
  return faults_.ropeFlipped(r.id, r.step, layer);
}

bool CachedAttention::swapsLayerRope(int64_t layer, int64_t row) const {
  const RequestState& r = *group_.at(static_cast<size_t>(row));
  return faults_.layerRopeSwapped(r.id, r.step, layer);
}

bool CachedAttention::rotatesWholeHead(int64_t layer, int64_t row) const {
  const RequestState& r = *group_.at(static_cast<size_t>(row));
  return faults_.wholeHeadRotated(r.id, r.step, layer);
}

bool CachedAttention::dropsFeature(AttentionFeature feature, int64_t layer, int64_t row) const {
  const RequestState& r = *group_.at(static_cast<size_t>(row));
  return faults_.featureDropped(feature, r.id, r.step, layer);
}

bool CachedAttention::absorbsLatent(int64_t layer, int64_t row) const {
  (void)layer;
  return absorbLatent_ && group_.at(static_cast<size_t>(row))->step >= 1;
}

int64_t CachedAttention::expertsPerToken(int64_t layer, int64_t row, int64_t topK) const {
  const RequestState& r = *group_.at(static_cast<size_t>(row));
  return faults_.expertsPerToken(r.id, r.step, layer, topK);
}

bool CachedAttention::dropsAttentionFactor(int64_t layer, int64_t row) const {
  const RequestState& r = *group_.at(static_cast<size_t>(row));
  return faults_.attentionFactorDropped(r.id, r.step, layer);
}

torch::Tensor CachedAttention::temperaturePositions(int64_t layer, const torch::Tensor& positions) const {
  torch::Tensor out = positions;
  for (size_t b = 0; b < group_.size(); ++b) {
    const RequestState& r = *group_[b];
    if (!faults_.temperatureAtCacheIndex(r.id, layer)) continue;
    // temperature_position: the query's cache index instead of its position, so every pad
    // before it counts (transformers' Llama 4 takes arange(s) + the cache's length).
    // The pads held before this forward (r.valid grows as each layer appends, so only up to
    // the layer's length before it), then this forward's own before each query.
    const int64_t held = std::min<int64_t>(before_[b][static_cast<size_t>(layer)], static_cast<int64_t>(r.valid.size()));
    int64_t pads = static_cast<int64_t>(std::count(r.valid.begin(), r.valid.begin() + held, uint8_t{0}));
    std::vector<int64_t> shift;
    for (const uint8_t real : fedMask_[b]) {
      if (!real) ++pads;
      shift.push_back(pads);
    }
    if (pads == 0) continue;
    if (out.data_ptr() == positions.data_ptr()) out = positions.clone();
    out.select(0, static_cast<int64_t>(b)).add_(torch::tensor(shift, torch::kLong));
    faults_.noteFired("temperature_position", r.id, r.step, layer);
  }
  return out;
}

RecurrentState CachedAttention::recurrentState(int64_t layer) {
  std::vector<torch::Tensor> conv, state;
  for (const RequestState* r : group_) {
    const bool fresh = r->lengths[static_cast<size_t>(layer)] == 0;
    const torch::Tensor c = cache_.convState(layer, r->slot), st = cache_.recurrentState(layer, r->slot);
    conv.push_back(fresh ? torch::zeros_like(c) : c);  // views: stack copies them once
    state.push_back(fresh ? torch::zeros_like(st) : st);
  }
  return {torch::stack(conv), torch::stack(state)};
}

void CachedAttention::keepRecurrentState(int64_t layer, const RecurrentState& next) {
  for (size_t b = 0; b < group_.size(); ++b) {
    RequestState& r = *group_[b];
    cache_.setRecurrentState(layer, r.slot, next.conv.select(0, static_cast<int64_t>(b)),
                             next.state.select(0, static_cast<int64_t>(b)));
    r.lengths[static_cast<size_t>(layer)] += static_cast<int64_t>(fedMask_[b].size());
  }
}

void CachedAttention::keepStateAfter(int64_t layer, int64_t length, const RecurrentState& state) {
  keptStates_[{layer, length}] = state;
}

const RecurrentState* CachedAttention::stateAfter(int64_t layer, int64_t length) const {
  const auto it = keptStates_.find({layer, length});
  return it == keptStates_.end() ? nullptr : &it->second;
}

torch::Tensor CachedAttention::realEntries(int64_t layer) const {
  std::vector<int64_t> flags;
  bool padded = false;
  for (size_t b = 0; b < fedMask_.size(); ++b) {
    const RequestState& r = *group_[b];
    // recurrent_state: this row's pads enter the recurrence as if they were tokens.
    const bool leak = faults_.padsEnterState(r.id, layer) &&
                      std::find(fedMask_[b].begin(), fedMask_[b].end(), uint8_t{0}) != fedMask_[b].end();
    if (leak) faults_.noteFired("recurrent_state", r.id, r.step, layer);
    for (const uint8_t real : fedMask_[b]) {
      flags.push_back(leak ? 1 : real);
      padded = padded || (!leak && real == 0);
    }
  }
  if (!padded) return {};
  return torch::tensor(flags, torch::kLong).to(torch::kBool).view({static_cast<int64_t>(fedMask_.size()), -1});
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
  const bool ring =
      !group_.empty() && L < group_[0]->rings.size() && group_[0]->rings[L].slots() > 0;
  std::vector<torch::Tensor> ringK, ringV;  // a ring layer: each member's records, as written
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
          faults_.noteFired("batch_row_mix", -1, r.step, layer);
        }
    }
    int64_t at = r.lengths[L];
    const int copies = faults_.duplicateAppend(r.id, r.step, layer) ? 2 : 1;
    if (ring) {
      ringK.push_back(copies == 2 ? torch::cat({k, k}, 1) : k);
      ringV.push_back(copies == 2 ? torch::cat({v, v}, 1) : v);
    }
    for (int c = 0; c < copies && !ring; ++c) {
      cache_.write(layer, r.slot, at, k, v);
      at += s;
    }
    if (ring) at += copies * s;
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
  if (ring) return attendRing(layer, ringK, ringV, s);
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
  if (window > 0 && faults_.windowExtra(layer) > 0) {
    window += 1;
    // It changes what a query sees once the cache holds more than the window.
    if (newLength > windows_[L]) faults_.noteFired("window_off_by_one", -1, group_[0]->step, layer);
  }
  const torch::Tensor ord = layerChunk(layer) > 0 ? streamOrdinals(valid) : torch::Tensor();
  const torch::Tensor queryOrd = ord.defined() ? ord.narrow(1, newLength - s, s) : ord;
  const int64_t chunk = chunkOf(layer, window, queryOrd);
  return {keys, values, buildAllowedMask(queryIdx, keyIdx, valid, window, chunk, queryOrd, ord)};
}

int64_t CachedAttention::chunkOf(int64_t layer, int64_t& window, const torch::Tensor& queryOrd) const {
  const int64_t chunk = layerChunk(layer);
  if (chunk == 0 || !faults_.chunkAsWindow(layer)) return chunk;
  // chunk_mask: the chunked layer masked as a sliding window of the chunk's size, so a query
  // past a chunk's first position also sees the previous chunk's last keys. That changes what
  // a query sees from its request's position `chunk` on, except on a chunk's last position.
  window = chunk;
  const auto beyond = queryOrd.ge(chunk).logical_and(torch::remainder(queryOrd, chunk).lt(chunk - 1));
  if (chunk > 1 && beyond.any().item<bool>()) faults_.noteFired("chunk_mask", -1, group_[0]->step, layer);
  return 0;
}

KvView CachedAttention::attendRing(int64_t layer, const std::vector<torch::Tensor>& ks,
                                   const std::vector<torch::Tensor>& vs, int64_t s) {
  const auto L = static_cast<size_t>(layer);
  std::vector<torch::Tensor> keys, values, masks;
  int64_t newLength = 0;
  for (size_t b = 0; b < group_.size(); ++b) {
    RequestState& r = *group_[b];
    RingSlots& slots = r.rings[L];
    const int64_t written = ks[b].size(1), first = r.lengths[L] - written;
    newLength = r.lengths[L];
    // What the layer reads: the slots as they were, then this forward's records.
    const int64_t held = slots.occupied();
    std::vector<int64_t> index(slots.cacheIndices().begin(), slots.cacheIndices().begin() + held);
    keys.push_back(torch::cat({cache_.copyKeys(layer, r.slot, 0, held), ks[b]}, 1).unsqueeze(0));
    values.push_back(
        torch::cat({cache_.copyValues(layer, r.slot, 0, held), vs[b]}, 1).unsqueeze(0));
    ringRecords_[b].keys[L] = ks[b];
    ringRecords_[b].values[L] = vs[b];
    // window_wrap: a forward that starts on a wrapped ring (its cache index at least the
    // slots) writes its entries one slot back, over one the next query needs. The forward
    // that wraps the ring writes right: it attends over its own records, so a shift that
    // began inside it would only rotate the ring (a prompt longer than the window).
    const int64_t shift = first >= slots.slots() ? faults_.ringWrapShift(r.id, layer) : 0;
    if (shift != 0 && written > 0) faults_.noteFired("window_wrap", r.id, r.step, layer);
    for (int64_t i = 0; i < written; ++i) {
      const int64_t j = first + i, inStep = i % s;
      const bool real = fedMask_[b][static_cast<size_t>(inStep)] != 0;
      const int64_t slot = slots.slotFor(j, shift);
      cache_.write(layer, r.slot, slot, ks[b].narrow(1, i, 1), vs[b].narrow(1, i, 1));
      slots.put(slot, j, real ? fedPositions_[b][static_cast<size_t>(inStep)] : -1);
      index.push_back(j);
    }
    std::vector<int64_t> valid;
    for (int64_t j : index) valid.push_back(r.valid[static_cast<size_t>(j)]);
    auto keyIdx = torch::tensor(index, torch::kLong);
    auto queryIdx = torch::arange(newLength - s, newLength, torch::kLong);
    // A chunked layer: each entry's place among the request's real tokens, over every cache
    // index the ring has held, read at the ring's keys and at the queries.
    torch::Tensor keyOrd, queryOrd;
    if (layerChunk(layer) > 0) {
      const auto ord = streamOrdinals(
          torch::tensor(std::vector<int64_t>(r.valid.begin(), r.valid.begin() + newLength), torch::kLong).view({1, -1}));
      keyOrd = ord.index_select(1, keyIdx);
      queryOrd = ord.narrow(1, newLength - s, s);
    }
    int64_t window = windows_[L];
    const int64_t chunk = chunkOf(layer, window, queryOrd);
    masks.push_back(buildAllowedMask(
        queryIdx, keyIdx, torch::tensor(valid, torch::kLong).to(torch::kBool).view({1, -1}),
        window, chunk, queryOrd, keyOrd));
  }
  if (keys.size() == 1) return {keys[0], values[0], masks[0]};
  return {torch::cat(keys, 0), torch::cat(values, 0), torch::cat(masks, 0)};
}

}  // namespace kvscope::detail
