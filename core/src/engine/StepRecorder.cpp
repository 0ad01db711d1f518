#include "engine/StepRecorder.hpp"

#include "model/TorchTapSink.hpp"

namespace kvscope::detail {

std::vector<TraceLayerRecord> StepRecorder::uncachedLayers(const KvTapCollector& taps, int64_t layers, int64_t W,
                                                           int64_t s) {
  std::vector<TraceLayerRecord> out;
  for (int64_t l = 0; l < layers; ++l) {
    TraceLayerRecord rec;
    const torch::Tensor k = taps.keysOf(static_cast<size_t>(l)), v = taps.valuesOf(static_cast<size_t>(l));
    if (k.defined()) {
      rec.cacheLength = W;
      rec.keys = toFloatTensor(k.narrow(1, W - s, s));
      rec.values = toFloatTensor(v.narrow(1, W - s, s));
    }
    out.push_back(std::move(rec));
  }
  return out;
}

std::vector<TraceLayerRecord> StepRecorder::layers(const RequestState& r,
                                                   const std::vector<int64_t>& lengthsBefore,
                                                   const std::vector<int64_t>& appendedUntil,
                                                   const RingRecords& ring) const {
  std::vector<TraceLayerRecord> out;
  for (int64_t l = 0; l < cache_.layers(); ++l) {
    const auto L = static_cast<size_t>(l);
    TraceLayerRecord rec;
    if (cache_.isRecurrent(l)) {  // a state, no K/V rows: the checksum of an empty row
      if (checksums_) rec.keyChecksum = rec.valueChecksum = traceRowChecksum({});
      if (statesEvery_ > 0 && r.step % statesEvery_ == 0) {  // r.step: the step just run
        rec.convState = toFloatTensor(cache_.convState(l, r.slot).contiguous());
        rec.recurrentState = toFloatTensor(cache_.recurrentState(l, r.slot).contiguous());
      }
      out.push_back(std::move(rec));
      continue;
    }
    const bool isRing = L < r.rings.size() && r.rings[L].slots() > 0;
    const int64_t held = isRing ? r.rings[L].occupied() : r.lengths[L];
    rec.cacheLength = held;
    if (isRing && L < ring.keys.size() && ring.keys[L].defined()) {
      rec.keys = toFloatTensor(ring.keys[L].contiguous());
      rec.values = toFloatTensor(ring.values[L].contiguous());
      rec.ringPositions = r.rings[L].positions();
    } else {
      // Rolled-back rows are past the cache's length but still in its storage.
      const int64_t end = L < appendedUntil.size() ? appendedUntil[L] : r.lengths[L];
      rec.keys = toFloatTensor(cache_.copyKeys(l, r.slot, lengthsBefore[L], end));
      rec.values = toFloatTensor(cache_.copyValues(l, r.slot, lengthsBefore[L], end));
    }
    if (checksums_) {
      rec.keyChecksum = cache_.checksumKeys(l, r.slot, held);
      rec.valueChecksum = cache_.checksumValues(l, r.slot, held);
    }
    if (snapshots_) {
      rec.snapshotKeys = toFloatTensor(cache_.copyKeys(l, r.slot, 0, held));
      rec.snapshotValues = toFloatTensor(cache_.copyValues(l, r.slot, 0, held));
    }
    out.push_back(std::move(rec));
  }
  return out;
}

}  // namespace kvscope::detail
