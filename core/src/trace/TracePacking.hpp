// Writes a trace's tensors packed (format version 2, docs/trace-format.md): one `logits`
// [R, V], per layer `layer{l}.k|v` [h_kv, A, d] and `layer{l}.cache_k|cache_v` [h_kv, S, d]
// with every step's columns in step order, and one U64 `checksums` [C, L, 2].
#pragma once

#include <vector>

#include "kvscope/SafetensorsWriter.hpp"
#include "kvscope/Trace.hpp"
#include "trace/TraceStepLayout.hpp"

namespace kvscope::detail {

/// Each step's place in the packed tensors. Throws UsageError when records of one layer
/// (or logits rows) disagree in shape, which no packed tensor can hold.
std::vector<StepLayout> planStepLayouts(const Trace& trace);

/// Adds the packed tensors for `layouts` (from planStepLayouts) to `writer`.
void addPackedTensors(const Trace& trace, const std::vector<StepLayout>& layouts, SafetensorsWriter& writer);

}  // namespace kvscope::detail
