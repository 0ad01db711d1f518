// Where the trace reader gets one step's tensors from: the per-step tensors of a version 1
// file or the packed tensors of a version 2 file. TraceStepResolver does the rest (derived
// records, cache lengths) the same way for both.
#pragma once

#include <optional>
#include <string>

#include "kvscope/FloatTensor.hpp"

namespace kvscope::detail {

struct KeyValuePair {
  FloatTensor keys;    // [h_kv, n, d]
  FloatTensor values;  // [h_kv, n, d]
};

class TraceTensorSource {
 public:
  virtual ~TraceTensorSource() = default;
  /// The step's logits row [V], or nothing when the file has none for it.
  virtual std::optional<FloatTensor> logits(size_t step) const = 0;
  /// The field a missing logits row is reported under.
  virtual std::string logitsField(size_t step) const = 0;
  /// Whether the file holds K/V records or snapshots for the step.
  virtual bool hasLayerData(size_t step) const = 0;
  virtual std::optional<KeyValuePair> appended(size_t step, size_t layer) const = 0;
  virtual std::optional<KeyValuePair> snapshot(size_t step, size_t layer) const = 0;
  /// The field a layer with neither records nor a snapshot is reported under.
  virtual std::string recordsField(size_t step, size_t layer) const = 0;
};

}  // namespace kvscope::detail
