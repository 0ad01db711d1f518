#include "trace/PackedTraceTensors.hpp"

#include "kvscope/Error.hpp"
#include "trace/TraceStepResolver.hpp"

namespace kvscope::detail {

namespace {
std::string layerName(size_t layer, const char* suffix) { return "layer" + std::to_string(layer) + "." + suffix; }
std::string entryField(const char* column, size_t step) {
  return std::string("steps.") + column + "[" + std::to_string(step) + "]";
}
}  // namespace

PackedTraceTensors::PackedTraceTensors(const SafetensorsFile& file, const TraceModelInfo& model,
                                       const std::vector<StepLayout>& layouts)
    : file_(file), model_(model), layouts_(layouts) {
  int64_t rows = 0;
  if (file_.contains("logits")) {
    const auto& e = file_.entry("logits");
    if (e.shape.size() != 2 || e.shape[1] != model_.vocabSize)
      throw InputError(file_.path(), "logits",
                       "shape " + shapeString(e.shape) + " but the model block says [rows, " +
                           std::to_string(model_.vocabSize) + "] (model.vocab_size)");
    rows = e.shape[0];
  }
  checkRows("logits", "logits_row", &StepLayout::logitsRow, rows);
  int64_t sumRows = 0;
  if (file_.contains("checksums")) {
    const auto& e = file_.entry("checksums");
    if (e.dtype != SafetensorsDtype::U64 || e.shape.size() != 3 || e.shape[1] != model_.numLayers || e.shape[2] != 2)
      throw InputError(file_.path(), "checksums",
                       safetensorsDtypeName(e.dtype) + " " + shapeString(e.shape) +
                           " but a U64 [rows, " + std::to_string(model_.numLayers) + ", 2] tensor is expected");
    sumRows = e.shape[0];
  }
  checkRows("checksums", "checksum_row", &StepLayout::checksumRow, sumRows);
  checkLayerTensors(appended_);
  checkLayerTensors(snapshot_);
}

void PackedTraceTensors::checkRows(const char* tensor, const char* column, int64_t StepLayout::*row,
                                   int64_t rows) const {
  for (size_t i = 0; i < layouts_.size(); ++i) {
    const int64_t r = layouts_[i].*row;
    if (r < 0) continue;
    if (!file_.contains(tensor))
      throw InputError(file_.path(), tensor,
                       std::string("missing, but ") + entryField(column, i) + " names row " + std::to_string(r) +
                           " (truncated trace?)");
    if (r >= rows)
      throw InputError(file_.path(), entryField(column, i),
                       "row " + std::to_string(r) + " but " + tensor + " has " + std::to_string(rows) + " rows");
  }
}

void PackedTraceTensors::checkLayerTensors(Kind& kind) {
  const auto L = static_cast<size_t>(model_.numLayers);
  kind.offsets.assign(L, std::vector<int64_t>(layouts_.size(), 0));
  for (size_t l = 0; l < L; ++l) {
    int64_t total = 0;
    for (size_t i = 0; i < layouts_.size(); ++i) {
      kind.offsets[l][i] = total;
      const auto& counts = layouts_[i].*kind.counts;
      if (l < counts.size() && counts[l]) total += *counts[l];
    }
    for (const char* suffix : {kind.keys, kind.values}) {
      const std::string name = layerName(l, suffix);
      if (!file_.contains(name)) {
        if (total > 0)
          throw InputError(file_.path(), name,
                           std::string("missing, but steps.") + kind.column + " names " + std::to_string(total) +
                               " columns of layer " + std::to_string(l) + " (truncated trace?)");
        continue;
      }
      const auto& e = file_.entry(name);
      checkRecordShape(file_.path(), name, e.shape, model_);
      if (e.shape[1] != total)
        throw InputError(file_.path(), name,
                         std::string("steps.") + kind.column + " adds up to " + std::to_string(total) +
                             " columns of layer " + std::to_string(l) + " but the tensor has " +
                             std::to_string(e.shape[1]) + " (truncated or inconsistent trace)");
    }
  }
}

void PackedTraceTensors::applyChecksums(Trace& trace) const {
  if (!file_.contains("checksums")) return;
  const std::vector<uint64_t> sums = file_.readUint64("checksums");
  const auto L = static_cast<size_t>(model_.numLayers);
  for (size_t i = 0; i < layouts_.size(); ++i) {
    const int64_t row = layouts_[i].checksumRow;
    if (row < 0) continue;
    auto& layers = trace.steps[i].layers;
    layers.resize(L);
    for (size_t l = 0; l < L; ++l) {
      layers[l].keyChecksum = sums[(static_cast<size_t>(row) * L + l) * 2];
      layers[l].valueChecksum = sums[(static_cast<size_t>(row) * L + l) * 2 + 1];
    }
  }
}

std::optional<FloatTensor> PackedTraceTensors::logits(size_t step) const {
  const int64_t row = layouts_[step].logitsRow;
  if (row < 0) return std::nullopt;
  FloatTensor out = FloatTensor::zeros({model_.vocabSize});
  file_.readFloatElements("logits", static_cast<size_t>(row * model_.vocabSize), out.data.size(), out.data.data());
  return out;
}

std::string PackedTraceTensors::logitsField(size_t step) const { return entryField("logits_row", step); }

bool PackedTraceTensors::hasLayerData(size_t step) const { return layouts_[step].hasLayerData(); }

std::optional<KeyValuePair> PackedTraceTensors::appended(size_t step, size_t layer) const {
  return slice(appended_, step, layer);
}

std::optional<KeyValuePair> PackedTraceTensors::snapshot(size_t step, size_t layer) const {
  return slice(snapshot_, step, layer);
}

std::string PackedTraceTensors::recordsField(size_t step, size_t) const { return entryField("appended", step); }

std::optional<KeyValuePair> PackedTraceTensors::slice(const Kind& kind, size_t step, size_t layer) const {
  const auto& counts = layouts_[step].*kind.counts;
  if (layer >= counts.size() || !counts[layer]) return std::nullopt;
  const int64_t begin = kind.offsets[layer][step], n = *counts[layer];
  return KeyValuePair{columns(layerName(layer, kind.keys), begin, n), columns(layerName(layer, kind.values), begin, n)};
}

FloatTensor PackedTraceTensors::columns(const std::string& name, int64_t begin, int64_t count) const {
  const int64_t h = model_.numKvHeads, d = model_.headDim;
  FloatTensor out = FloatTensor::zeros({h, count, d});
  if (count == 0) return out;
  const int64_t width = file_.entry(name).shape[1];
  for (int64_t hh = 0; hh < h; ++hh)
    file_.readFloatElements(name, static_cast<size_t>((hh * width + begin) * d), static_cast<size_t>(count * d),
                            out.data.data() + hh * count * d);
  return out;
}

}  // namespace kvscope::detail
