#include "trace/TraceStepResolver.hpp"

#include <algorithm>
#include <map>

#include "kvscope/Error.hpp"

namespace kvscope::detail {

namespace {
// Columns [begin, end) of a [h, t, d] tensor.
FloatTensor columns(const FloatTensor& t, int64_t begin, int64_t end) {
  const int64_t h = t.shape[0], T = t.shape[1], d = t.shape[2], n = end - begin;
  FloatTensor out = FloatTensor::zeros({h, n, d});
  for (int64_t hh = 0; hh < h; ++hh)
    std::copy(t.data.begin() + (hh * T + begin) * d, t.data.begin() + (hh * T + end) * d,
              out.data.begin() + hh * n * d);
  return out;
}
}  // namespace

void checkRecordShape(const std::string& file, const std::string& tensor, const std::vector<int64_t>& shape,
                      const TraceModelInfo& model, bool values) {
  const int64_t d = values ? model.valueDim() : model.headDim;
  if (shape.size() != 3 || shape[0] != model.numKvHeads || shape[2] != d)
    throw InputError(file, tensor,
                     "shape " + shapeString(shape) + " but the model block says [" + std::to_string(model.numKvHeads) +
                         ", t, " + std::to_string(d) + "]" +
                         (values && model.valueDim() != model.headDim ? " (value_head_dim)" : ""));
}

void resolveStepTensors(Trace& trace, const TraceTensorSource& source, const std::string& path) {
  const auto numLayers = static_cast<size_t>(trace.model.numLayers);
  std::map<int64_t, std::vector<int64_t>> lastLength;  // request -> per-layer length so far
  for (size_t i = 0; i < trace.steps.size(); ++i) {
    TraceStep& s = trace.steps[i];
    if (auto row = source.logits(i)) {
      s.logits = std::move(*row);
    } else if (s.chosenToken >= 0) {
      throw InputError(path, source.logitsField(i),
                       "steps[" + std::to_string(i) + "] chose a token but its logits row is missing (truncated trace?)");
    }
    if (!source.hasLayerData(i)) continue;
    auto& prev = lastLength[s.request];
    if (prev.empty()) prev.assign(numLayers, 0);
    if (s.resetsCache())
      std::fill(prev.begin(), prev.end(), 0);
    std::vector<int64_t> declared;  // by model layer
    for (const auto& l : s.layers) declared.push_back(l.cacheLength);
    s.layers.resize(numLayers);  // indexed by model layer; a subset's others stay empty
    for (const int64_t layer : trace.layerIndices()) {
      const auto l = static_cast<size_t>(layer);
      auto& rec = s.layers[l];
      if (trace.layerKind(layer).recurrent) {  // a state, no K/V records
        const auto kv = source.appended(i, l);
        if ((kv && kv->keys.shape.size() == 3 && kv->keys.shape[1] > 0) || source.snapshot(i, l))
          throw InputError(path, source.recordsField(i, l),
                           "layer " + std::to_string(l) + " of steps[" + std::to_string(i) +
                               "] has K/V records, but layer_kinds says it is recurrent (a state, no K/V)");
        continue;
      }
      auto snap = source.snapshot(i, l);
      const bool hasSnapshot = snap.has_value();
      if (snap) {
        rec.snapshotKeys = std::move(snap->keys);
        rec.snapshotValues = std::move(snap->values);
      }
      if (auto kv = source.appended(i, l)) {
        rec.keys = std::move(kv->keys);
        rec.values = std::move(kv->values);
      } else if (hasSnapshot) {
        // Full-snapshot trace: the appended records are what is new since the last step.
        const int64_t t = rec.snapshotKeys.shape[1];
        const int64_t from = std::min(prev[l], t);
        rec.keys = columns(rec.snapshotKeys, from, t);
        rec.values = columns(rec.snapshotValues, from, t);
      } else {
        throw InputError(path, source.recordsField(i, l),
                         "layer " + std::to_string(l) + " of steps[" + std::to_string(i) +
                             "] has neither appended records nor a snapshot (truncated trace?)");
      }
      // A prefix-cache hit's records start with its reused rows (docs/trace-format.md).
      if (s.reusedCount > rec.keys.shape[1])
        throw InputError(path, "steps.reused_count[" + std::to_string(i) + "]",
                         std::to_string(s.reusedCount) +
                             " entries taken from the prefix cache, but layer " + std::to_string(l) +
                             " of the step has " + std::to_string(rec.keys.shape[1]) +
                             " records (a hit step's records start with the reused rows)");
      // Undeclared: a speculative step rolled its rejected drafts back (when it appended them).
      const int64_t rolledBack =
          rec.keys.shape[1] >= static_cast<int64_t>(s.fedIds.size()) ? s.rejectedCount() : 0;
      // A ring layer holds at most its slots (docs/trace-format.md, ring caches).
      const int64_t slots = trace.layerKind(layer).ringSlots;
      const int64_t grown = prev[l] + rec.keys.shape[1] - rolledBack;
      rec.cacheLength = l < declared.size() && declared[l] > 0
                            ? declared[l]
                            : (hasSnapshot ? rec.snapshotKeys.shape[1]
                                           : (slots > 0 ? std::min(grown, slots) : grown));
      // The entries fed so far (for a ring layer more than it holds).
      prev[l] = slots > 0 ? grown : rec.cacheLength;
    }
  }
}

}  // namespace kvscope::detail
