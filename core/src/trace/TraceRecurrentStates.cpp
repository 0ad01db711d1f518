#include "trace/TraceRecurrentStates.hpp"

#include <algorithm>

#include "kvscope/Error.hpp"

namespace kvscope::detail {

namespace {

struct StateTensor {
  const char* suffix;
  FloatTensor TraceLayerRecord::*member;
  size_t rank;  // of one row
};
const StateTensor kStates[] = {{"conv_state", &TraceLayerRecord::convState, 2},
                               {"recurrent_state", &TraceLayerRecord::recurrentState, 3}};

std::string stateTensorName(int64_t layer, const char* suffix) { return "layer" + std::to_string(layer) + "." + suffix; }
std::string stateRowField(size_t step) { return "steps.state_row[" + std::to_string(step) + "]"; }

bool hasRecordedState(const TraceLayerRecord& r) { return !r.convState.empty() || !r.recurrentState.empty(); }

}  // namespace

void planStateRows(const Trace& trace, std::vector<StepLayout>& layouts) {
  const std::vector<int64_t> recurrent = trace.recurrentLayers();
  std::vector<std::vector<int64_t>> shapes(2 * recurrent.size());  // per (layer, kind): the first row's
  int64_t rows = 0;
  for (size_t i = 0; i < trace.steps.size(); ++i) {
    const auto& layers = trace.steps[i].layers;
    for (size_t l = 0; l < layers.size(); ++l)
      if (hasRecordedState(layers[l]) && !trace.layerKind(static_cast<int64_t>(l)).recurrent)
        throw UsageError("trace steps[" + std::to_string(i) + "]: layer " + std::to_string(l) +
                         " has a recurrent state, but layer_kinds does not call it recurrent");
    size_t with = 0;
    for (size_t j = 0; j < recurrent.size(); ++j) {
      const auto at = static_cast<size_t>(recurrent[j]);
      if (at >= layers.size() || !hasRecordedState(layers[at])) continue;
      ++with;
      for (size_t k = 0; k < 2; ++k) {
        const FloatTensor& t = layers[at].*kStates[k].member;
        auto& want = shapes[2 * j + k];
        if (t.shape.size() != kStates[k].rank || (!want.empty() && t.shape != want))
          throw UsageError("trace steps[" + std::to_string(i) + "]: layer " + std::to_string(at) + "'s " +
                           kStates[k].suffix + " has shape " + t.shapeString() +
                           (want.empty() ? "" : " after " + shapeString(want)));
        want = t.shape;
      }
    }
    if (with > 0 && with != recurrent.size())
      throw UsageError("trace steps[" + std::to_string(i) + "]: states for " + std::to_string(with) + " of the " +
                       std::to_string(recurrent.size()) + " recurrent layers (a step records every one or none)");
    layouts[i].stateRow = with > 0 ? rows++ : -1;
  }
}

void addRecurrentStates(const Trace& trace, const std::vector<StepLayout>& layouts, SafetensorsWriter& w) {
  int64_t rows = 0;
  for (const auto& at : layouts) rows += at.stateRow >= 0 ? 1 : 0;
  if (rows == 0) return;
  for (const int64_t l : trace.recurrentLayers())
    for (const auto& kind : kStates) {
      std::vector<float> data;
      std::vector<int64_t> shape{rows};
      for (size_t i = 0; i < layouts.size(); ++i) {
        if (layouts[i].stateRow < 0) continue;
        const FloatTensor& t = trace.steps[i].layers[static_cast<size_t>(l)].*kind.member;
        if (shape.size() == 1) shape.insert(shape.end(), t.shape.begin(), t.shape.end());
        data.insert(data.end(), t.data.begin(), t.data.end());
      }
      w.addFloat(stateTensorName(l, kind.suffix), shape, data.data());
    }
}

void applyRecurrentStates(const SafetensorsFile& file, const std::vector<StepLayout>& layouts, Trace& trace) {
  const std::vector<int64_t> recurrent = trace.recurrentLayers();
  int64_t rows = 0;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const int64_t r = layouts[i].stateRow;
    if (r < 0) continue;
    if (r != rows)
      throw InputError(file.path(), stateRowField(i),
                       "row " + std::to_string(r) + ", but the steps that record states take rows 0, 1, 2, ... in "
                       "step order (" + std::to_string(rows) + " expected)");
    ++rows;
  }
  // Every state tensor belongs to a recurrent layer and has R rows of one shape.
  for (const auto& name : file.names())
    for (const auto& kind : kStates) {
      const std::string suffix = std::string(".") + kind.suffix;
      if (name.rfind("layer", 0) != 0 || name.size() <= suffix.size() ||
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        continue;
      const std::string digits = name.substr(5, name.size() - 5 - suffix.size());
      const bool isLayer = !digits.empty() && digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string::npos;
      if (!isLayer || std::find(recurrent.begin(), recurrent.end(), std::stoll(digits)) == recurrent.end())
        throw InputError(file.path(), name, "a recurrent state, but layer_kinds names no recurrent layer " + digits);
      if (rows == 0)
        throw InputError(file.path(), name, "recurrent states, but no step names a row of them (steps.state_row)");
      const auto& e = file.entry(name);
      if (e.dtype != SafetensorsDtype::F32 || e.shape.size() != kind.rank + 1 || e.shape[0] != rows)
        throw InputError(file.path(), name,
                         safetensorsDtypeName(e.dtype) + " " + shapeString(e.shape) + " but an F32 tensor of " +
                             std::to_string(rows) + " rows (the steps that record states) and " +
                             std::to_string(kind.rank) + " more axes is expected");
    }
  if (rows == 0) return;
  for (const int64_t l : recurrent)
    for (const auto& kind : kStates) {
      const std::string name = stateTensorName(l, kind.suffix);
      if (!file.contains(name))
        throw InputError(file.path(), name,
                         "missing, but " + std::to_string(rows) + " steps record recurrent states (steps.state_row)");
      const FloatTensor all = file.readFloat(name);
      const std::vector<int64_t> rowShape(all.shape.begin() + 1, all.shape.end());
      const auto rowSize = static_cast<size_t>(all.numel() / rows);
      for (size_t i = 0; i < layouts.size(); ++i) {
        const int64_t r = layouts[i].stateRow;
        if (r < 0) continue;
        auto& layers = trace.steps[i].layers;
        layers.resize(static_cast<size_t>(trace.model.numLayers));
        const auto first = all.data.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(r) * rowSize);
        layers[static_cast<size_t>(l)].*kind.member = FloatTensor(rowShape, std::vector<float>(first, first + rowSize));
      }
    }
}

}  // namespace kvscope::detail
