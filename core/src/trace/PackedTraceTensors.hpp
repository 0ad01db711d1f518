// The tensors of a version 2 trace file, validated against the step layouts on
// construction (shapes against the model block, every row index in range, the column
// counts adding up to each packed tensor's width), then sliced per step on demand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/Trace.hpp"
#include "trace/TraceStepLayout.hpp"
#include "trace/TraceTensorSource.hpp"

namespace kvscope::detail {

class PackedTraceTensors : public TraceTensorSource {
 public:
  /// Throws InputError naming the file and the tensor (e.g. "layer1.k") or the column
  /// entry (e.g. "steps.logits_row[2]") that is wrong.
  /// `layers`: the model layers the layouts' per-layer entries stand for, in order (the
  /// trace's layerIndices()); tensors are named by model layer (`layer{l}.k`).
  PackedTraceTensors(const SafetensorsFile& file, const TraceModelInfo& model,
                     const std::vector<StepLayout>& layouts, std::vector<int64_t> layers);

  /// Copies the `checksums` rows into the steps' layer records (indexed by model layer).
  void applyChecksums(Trace& trace) const;

  std::optional<FloatTensor> logits(size_t step) const override;
  std::string logitsField(size_t step) const override;
  bool hasLayerData(size_t step) const override;
  std::optional<KeyValuePair> appended(size_t step, size_t layer) const override;
  std::optional<KeyValuePair> snapshot(size_t step, size_t layer) const override;
  std::string recordsField(size_t step, size_t layer) const override;

 private:
  struct Kind {
    const char* column;    // "appended" | "snapshot_lengths"
    const char* keys;      // tensor suffix: "k" | "cache_k"
    const char* values;    // "v" | "cache_v"
    std::vector<std::optional<int64_t>> StepLayout::*counts;
    std::vector<std::vector<int64_t>> offsets;  // [entry of layers_][step] first column
  };
  void checkLayerTensors(Kind& kind);
  void checkNoOtherLayers() const;
  /// The entry of layers_ that holds model layer `layer`, or -1.
  int64_t entryOf(size_t layer) const;
  void checkRows(const char* tensor, const char* column, int64_t StepLayout::*row, int64_t rows) const;
  std::optional<KeyValuePair> slice(const Kind& kind, size_t step, size_t layer) const;
  /// Columns begin..begin+count of a packed [h, T, d] tensor.
  FloatTensor columns(const std::string& name, int64_t begin, int64_t count, int64_t d) const;

  const SafetensorsFile& file_;
  const TraceModelInfo& model_;
  const std::vector<StepLayout>& layouts_;
  std::vector<int64_t> layers_;  // model layer of each per-layer entry
  Kind appended_{"appended", "k", "v", &StepLayout::appended, {}};
  Kind snapshot_{"snapshot_lengths", "cache_k", "cache_v", &StepLayout::snapshot, {}};
};

}  // namespace kvscope::detail
