#include "engine/StepRecorder.hpp"

#include "model/TorchTapSink.hpp"

namespace kvscope::detail {

std::vector<TraceLayerRecord> StepRecorder::layers(
    const RequestState& r, const std::vector<int64_t>& lengthsBefore,
    const std::vector<int64_t>& appendedUntil) const {
  std::vector<TraceLayerRecord> out;
  for (int64_t l = 0; l < cache_.layers(); ++l) {
    const auto L = static_cast<size_t>(l);
    TraceLayerRecord rec;
    rec.cacheLength = r.lengths[L];
    // Rolled-back rows are past the cache's length but still in its storage.
    const int64_t end = L < appendedUntil.size() ? appendedUntil[L] : r.lengths[L];
    rec.keys = toFloatTensor(cache_.copyKeys(l, r.slot, lengthsBefore[L], end));
    rec.values = toFloatTensor(cache_.copyValues(l, r.slot, lengthsBefore[L], end));
    if (checksums_) {
      rec.keyChecksum = cache_.checksumKeys(l, r.slot, r.lengths[L]);
      rec.valueChecksum = cache_.checksumValues(l, r.slot, r.lengths[L]);
    }
    if (snapshots_) {
      rec.snapshotKeys = toFloatTensor(cache_.copyKeys(l, r.slot, 0, r.lengths[L]));
      rec.snapshotValues = toFloatTensor(cache_.copyValues(l, r.slot, 0, r.lengths[L]));
    }
    out.push_back(std::move(rec));
  }
  return out;
}

}  // namespace kvscope::detail
