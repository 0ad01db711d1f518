#include "trace/TracePacking.hpp"

#include <algorithm>

#include "kvscope/Error.hpp"

namespace kvscope::detail {

namespace {

bool stored(const FloatTensor& t) { return !t.shape.empty(); }

// The layers the file stores, by model index: recorded_layers, or every layer a step has.
std::vector<int64_t> storedLayers(const Trace& trace) {
  if (trace.isLayerSubset()) return trace.recordedLayers;
  size_t n = 0;
  for (const auto& s : trace.steps) n = std::max(n, s.layers.size());
  std::vector<int64_t> all(n);
  for (size_t l = 0; l < n; ++l) all[l] = static_cast<int64_t>(l);
  return all;
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
  const std::vector<int64_t> layers = storedLayers(trace);
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
    for (size_t l = 0; l < s.layers.size(); ++l) {
      const TraceLayerRecord& rec = s.layers[l];
      if (trace.hasLayer(static_cast<int64_t>(l)) || !trace.isLayerSubset()) continue;
      if (stored(rec.keys) || stored(rec.snapshotKeys) || rec.keyChecksum || rec.valueChecksum)
        throw UsageError("trace steps[" + std::to_string(i) + "]: layer " + std::to_string(l) +
                         " has records but is not in the trace's recorded layers");
    }
    for (int64_t layer : layers) {
      if (static_cast<size_t>(layer) >= s.layers.size()) {
        at.appended.emplace_back();
        at.snapshot.emplace_back();
        allSums = false;
        continue;
      }
      const TraceLayerRecord& rec = s.layers[static_cast<size_t>(layer)];
      at.appended.push_back(stored(rec.keys) ? std::optional<int64_t>(rec.keys.shape.at(1)) : std::nullopt);
      at.snapshot.push_back(stored(rec.snapshotKeys) ? std::optional<int64_t>(rec.snapshotKeys.shape.at(1))
                                                     : std::nullopt);
      anyAppended = anyAppended || stored(rec.keys);
      anySnapshot = anySnapshot || stored(rec.snapshotKeys);
      allSums = allSums && rec.keyChecksum && rec.valueChecksum;
      if (stored(rec.keys) != stored(rec.values) || (stored(rec.keys) && !rec.keys.sameEntriesAs(rec.values)) ||
          stored(rec.snapshotKeys) != stored(rec.snapshotValues) ||
          (stored(rec.snapshotKeys) && !rec.snapshotKeys.sameEntriesAs(rec.snapshotValues)))
        throw UsageError("trace steps[" + std::to_string(i) + "]: keys and values of a layer hold different "
                         "entries (heads or records)");
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
  // Tensors are named by model layer; checksum rows follow the stored layers in order.
  const std::vector<int64_t> layers = storedLayers(trace);
  const size_t L = layers.size();
  for (const int64_t l : layers) {
    const std::string base = "layer" + std::to_string(l);
    const auto layer = static_cast<size_t>(l);
    addLayerTensor(trace, layer, keysOf, base + ".k", w);
    addLayerTensor(trace, layer, valuesOf, base + ".v", w);
    addLayerTensor(trace, layer, snapshotKeysOf, base + ".cache_k", w);
    addLayerTensor(trace, layer, snapshotValuesOf, base + ".cache_v", w);
  }
  if (sumRows > 0) {
    std::vector<uint64_t> sums(static_cast<size_t>(sumRows) * L * 2, 0);
    for (size_t i = 0; i < trace.steps.size(); ++i) {
      const int64_t row = layouts[i].checksumRow;
      if (row < 0) continue;
      const auto& records = trace.steps[i].layers;
      if (records.size() < static_cast<size_t>(layers.back() + 1))
        throw UsageError("trace steps[" + std::to_string(i) + "]: checksums for " +
                         std::to_string(records.size()) + " layers, other steps have " +
                         std::to_string(L));
      for (size_t j = 0; j < L; ++j) {
        const TraceLayerRecord& rec = records[static_cast<size_t>(layers[j])];
        sums[(static_cast<size_t>(row) * L + j) * 2] = *rec.keyChecksum;
        sums[(static_cast<size_t>(row) * L + j) * 2 + 1] = *rec.valueChecksum;
      }
    }
    w.addUint64("checksums", {sumRows, static_cast<int64_t>(L), 2}, sums);
  }
}

}  // namespace kvscope::detail
