#include "trace/TracePacking.hpp"

#include <algorithm>

#include "kvscope/Error.hpp"

namespace kvscope::detail {

namespace {

bool stored(const FloatTensor& t) { return !t.shape.empty(); }

size_t layerCount(const Trace& trace) {
  size_t n = 0;
  for (const auto& s : trace.steps) n = std::max(n, s.layers.size());
  return n;
}

// The records of one layer and kind: which tensor of each record, in step order.
using Pick = const FloatTensor& (*)(const TraceLayerRecord&);
const FloatTensor& keysOf(const TraceLayerRecord& r) { return r.keys; }
const FloatTensor& valuesOf(const TraceLayerRecord& r) { return r.values; }
const FloatTensor& snapshotKeysOf(const TraceLayerRecord& r) { return r.snapshotKeys; }
const FloatTensor& snapshotValuesOf(const TraceLayerRecord& r) { return r.snapshotValues; }

// Concatenates every step's [h, n, d] records of `layer` along axis 1.
void addLayerTensor(const Trace& trace, size_t layer, Pick pick, const std::string& name, SafetensorsWriter& w) {
  std::vector<const FloatTensor*> parts;
  int64_t total = 0;
  for (const auto& s : trace.steps) {
    if (layer >= s.layers.size() || !stored(pick(s.layers[layer]))) continue;
    const FloatTensor& t = pick(s.layers[layer]);
    if (t.shape.size() != 3) throw UsageError("trace tensor " + name + ": a record has shape " + t.shapeString() + ", expected [h_kv, n, d]");
    if (!parts.empty() && (t.shape[0] != parts[0]->shape[0] || t.shape[2] != parts[0]->shape[2]))
      throw UsageError("trace tensor " + name + ": records " + parts[0]->shapeString() + " and " + t.shapeString() +
                       " differ in heads or head size and cannot be packed");
    parts.push_back(&t);
    total += t.shape[1];
  }
  if (total == 0) return;  // the format lets an all-empty tensor be left out
  const int64_t h = parts[0]->shape[0], d = parts[0]->shape[2];
  FloatTensor packed = FloatTensor::zeros({h, total, d});
  int64_t at = 0;
  for (const FloatTensor* t : parts) {
    const int64_t n = t->shape[1];
    for (int64_t hh = 0; hh < h; ++hh)
      std::copy(t->data.begin() + hh * n * d, t->data.begin() + (hh + 1) * n * d,
                packed.data.begin() + (hh * total + at) * d);
    at += n;
  }
  w.addFloat(name, packed);
}

}  // namespace

std::vector<StepLayout> planStepLayouts(const Trace& trace) {
  std::vector<StepLayout> layouts(trace.steps.size());
  int64_t logitsRows = 0, checksumRows = 0, vocab = -1;
  for (size_t i = 0; i < trace.steps.size(); ++i) {
    const TraceStep& s = trace.steps[i];
    StepLayout& at = layouts[i];
    if (!s.logits.empty()) {
      if (vocab >= 0 && s.logits.numel() != vocab)
        throw UsageError("trace steps[" + std::to_string(i) + "]: a logits row of " + std::to_string(s.logits.numel()) +
                         " values after rows of " + std::to_string(vocab));
      vocab = s.logits.numel();
      at.logitsRow = logitsRows++;
    }
    bool anyAppended = false, anySnapshot = false, allSums = !s.layers.empty();
    for (const auto& rec : s.layers) {
      at.appended.push_back(stored(rec.keys) ? std::optional<int64_t>(rec.keys.shape.at(1)) : std::nullopt);
      at.snapshot.push_back(stored(rec.snapshotKeys) ? std::optional<int64_t>(rec.snapshotKeys.shape.at(1))
                                                     : std::nullopt);
      anyAppended = anyAppended || stored(rec.keys);
      anySnapshot = anySnapshot || stored(rec.snapshotKeys);
      allSums = allSums && rec.keyChecksum && rec.valueChecksum;
      if (stored(rec.keys) != stored(rec.values) || (stored(rec.keys) && rec.keys.shape != rec.values.shape) ||
          stored(rec.snapshotKeys) != stored(rec.snapshotValues) ||
          (stored(rec.snapshotKeys) && rec.snapshotKeys.shape != rec.snapshotValues.shape))
        throw UsageError("trace steps[" + std::to_string(i) + "]: keys and values of a layer differ in shape");
    }
    if (!anyAppended) at.appended.clear();
    if (!anySnapshot) at.snapshot.clear();
    if (allSums) at.checksumRow = checksumRows++;
  }
  return layouts;
}

void addPackedTensors(const Trace& trace, const std::vector<StepLayout>& layouts, SafetensorsWriter& w) {
  int64_t rows = 0, vocab = 0, sumRows = 0;
  for (size_t i = 0; i < trace.steps.size(); ++i) {
    if (layouts[i].logitsRow >= 0) {
      ++rows;
      vocab = trace.steps[i].logits.numel();
    }
    if (layouts[i].checksumRow >= 0) ++sumRows;
  }
  if (rows > 0) {
    FloatTensor logits = FloatTensor::zeros({rows, vocab});
    for (size_t i = 0; i < trace.steps.size(); ++i)
      if (layouts[i].logitsRow >= 0)
        std::copy(trace.steps[i].logits.data.begin(), trace.steps[i].logits.data.end(),
                  logits.data.begin() + layouts[i].logitsRow * vocab);
    w.addFloat("logits", logits);
  }
  const size_t L = layerCount(trace);
  for (size_t l = 0; l < L; ++l) {
    const std::string base = "layer" + std::to_string(l);
    addLayerTensor(trace, l, keysOf, base + ".k", w);
    addLayerTensor(trace, l, valuesOf, base + ".v", w);
    addLayerTensor(trace, l, snapshotKeysOf, base + ".cache_k", w);
    addLayerTensor(trace, l, snapshotValuesOf, base + ".cache_v", w);
  }
  if (sumRows > 0) {
    std::vector<uint64_t> sums(static_cast<size_t>(sumRows) * L * 2, 0);
    for (size_t i = 0; i < trace.steps.size(); ++i) {
      const int64_t row = layouts[i].checksumRow;
      if (row < 0) continue;
      const auto& layers = trace.steps[i].layers;
      if (layers.size() != L)
        throw UsageError("trace steps[" + std::to_string(i) + "]: checksums for " + std::to_string(layers.size()) +
                         " layers, other steps have " + std::to_string(L));
      for (size_t l = 0; l < L; ++l) {
        sums[(static_cast<size_t>(row) * L + l) * 2] = *layers[l].keyChecksum;
        sums[(static_cast<size_t>(row) * L + l) * 2 + 1] = *layers[l].valueChecksum;
      }
    }
    w.addUint64("checksums", {sumRows, static_cast<int64_t>(L), 2}, sums);
  }
}

}  // namespace kvscope::detail
