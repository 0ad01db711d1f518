// A recurrent layer's state after a step (docs/trace-format.md, "Recurrent layers and their
// states"): per recurrent layer l the F32 tensors `layer{l}.conv_state` [R, C, K] (the causal
// conv's last K inputs) and `layer{l}.recurrent_state` [R, Hv, Dk, Dv], one row per step that
// records states, named by the step column `state_row`.
#pragma once

#include <vector>

#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/SafetensorsWriter.hpp"
#include "kvscope/Trace.hpp"
#include "trace/TraceStepLayout.hpp"

namespace kvscope::detail {

/// Gives each step whose recurrent layers carry states its row, in step order. Throws
/// UsageError for a state on a layer layer_kinds does not call recurrent, a step with the
/// states of some recurrent layers but not all, or a layer's states of different shapes.
void planStateRows(const Trace& trace, std::vector<StepLayout>& layouts);
/// Adds the state tensors for the rows planStateRows gave (nothing when there are none).
void addRecurrentStates(const Trace& trace, const std::vector<StepLayout>& layouts, SafetensorsWriter& writer);
/// Validates the state tensors against the trace's recurrent layers and the steps'
/// `state_row`, naming the file and the tensor or column, and copies each row into the steps'
/// layer records.
void applyRecurrentStates(const SafetensorsFile& file, const std::vector<StepLayout>& layouts, Trace& trace);

}  // namespace kvscope::detail
