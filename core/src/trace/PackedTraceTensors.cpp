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
                                       const std::vector<StepLayout>& layouts,
                                       std::vector<int64_t> layers)
    : file_(file), model_(model), layouts_(layouts), layers_(std::move(layers)) {
  const auto L = static_cast<int64_t>(layers_.size());
  const bool subset = L != model_.numLayers;
  if (subset) checkNoOtherLayers();
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
    if (e.dtype != SafetensorsDtype::U64 || e.shape.size() != 3 || e.shape[1] != L ||
        e.shape[2] != 2)
      throw InputError(file_.path(), "checksums",
                       safetensorsDtypeName(e.dtype) + " " + shapeString(e.shape) +
                           " but a U64 [rows, " + std::to_string(L) + ", 2] tensor is expected" +
                           (subset ? " (one entry per layer of recorded_layers)" : ""));
    sumRows = e.shape[0];
  }
  checkRows("checksums", "checksum_row", &StepLayout::checksumRow, sumRows);
  checkLayerTensors(appended_);
  checkLayerTensors(snapshot_);
}

int64_t PackedTraceTensors::entryOf(size_t layer) const {
  for (size_t j = 0; j < layers_.size(); ++j)
    if (layers_[j] == static_cast<int64_t>(layer)) return static_cast<int64_t>(j);
  return -1;
}

// A layer subset's file holds no tensor of another layer: records of a layer the trace
// says it left out are a damaged or mislabelled file, never silently dropped.
void PackedTraceTensors::checkNoOtherLayers() const {
  for (const auto& name : file_.names()) {
    if (name.rfind("layer", 0) != 0) continue;
    const auto dot = name.find('.');
    const std::string digits =
        name.substr(5, dot == std::string::npos ? std::string::npos : dot - 5);
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    if (entryOf(static_cast<size_t>(std::stoll(digits))) < 0)
      throw InputError(
          file_.path(), name,
          "layer " + digits + " is not in recorded_layers (the layers this trace holds)");
  }
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
  const size_t L = layers_.size();
  kind.offsets.assign(L, std::vector<int64_t>(layouts_.size(), 0));
  for (size_t j = 0; j < L; ++j) {
    const auto l = static_cast<size_t>(layers_[j]);
    int64_t total = 0;
    for (size_t i = 0; i < layouts_.size(); ++i) {
      kind.offsets[j][i] = total;
      const auto& counts = layouts_[i].*kind.counts;
      if (j < counts.size() && counts[j]) total += *counts[j];
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
      checkRecordShape(file_.path(), name, e.shape, model_, suffix == kind.values);
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
  const size_t L = layers_.size();
  for (size_t i = 0; i < layouts_.size(); ++i) {
    const int64_t row = layouts_[i].checksumRow;
    if (row < 0) continue;
    auto& layers = trace.steps[i].layers;
    layers.resize(static_cast<size_t>(model_.numLayers));
    for (size_t j = 0; j < L; ++j) {
      auto& rec = layers[static_cast<size_t>(layers_[j])];
      rec.keyChecksum = sums[(static_cast<size_t>(row) * L + j) * 2];
      rec.valueChecksum = sums[(static_cast<size_t>(row) * L + j) * 2 + 1];
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
  const int64_t entry = entryOf(layer);
  if (entry < 0) return std::nullopt;
  const auto j = static_cast<size_t>(entry);
  if (j >= counts.size() || !counts[j]) return std::nullopt;
  const int64_t begin = kind.offsets[j][step], n = *counts[j];
  return KeyValuePair{columns(layerName(layer, kind.keys), begin, n, model_.headDim),
                      columns(layerName(layer, kind.values), begin, n, model_.valueDim())};
}

FloatTensor PackedTraceTensors::columns(const std::string& name, int64_t begin, int64_t count, int64_t d) const {
  const int64_t h = model_.numKvHeads;
  FloatTensor out = FloatTensor::zeros({h, count, d});
  if (count == 0) return out;
  const int64_t width = file_.entry(name).shape[1];
  for (int64_t hh = 0; hh < h; ++hh)
    file_.readFloatElements(name, static_cast<size_t>((hh * width + begin) * d), static_cast<size_t>(count * d),
                            out.data.data() + hh * count * d);
  return out;
}

}  // namespace kvscope::detail
