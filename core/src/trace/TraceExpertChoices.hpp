// The experts a mixture-of-experts engine's router chose (docs/trace-format.md, "Expert
// choices"): the I32 tensor `experts` [N, L, K] holding, for each step whose `expert_row`
// names a row, one row per fed entry (rows expert_row .. expert_row + fed - 1), per model layer
// the K experts in the router's order (-1: a dense layer, an unused slot).
#pragma once

#include <string>
#include <vector>

#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/SafetensorsWriter.hpp"
#include "kvscope/Trace.hpp"
#include "trace/TraceStepLayout.hpp"

namespace kvscope::detail {

/// Gives each step that carries expert choices its first row of `experts`. Throws
/// UsageError when a step's choices do not cover its fed entries and every model layer, or
/// hold an id below -1. Steps may differ in their slot count: the file takes the largest and
/// pads the others' rows with -1.
void planExpertRows(const Trace& trace, std::vector<StepLayout>& layouts);
/// Adds `experts` for the rows planExpertRows gave (nothing when there are none).
void addExpertChoices(const Trace& trace, const std::vector<StepLayout>& layouts,
                      SafetensorsWriter& writer);
/// Validates `experts` against the model's layers and the steps' `expert_row`, and copies
/// each step's rows into its ExpertChoices.
void applyExpertChoices(const SafetensorsFile& file, const std::vector<StepLayout>& layouts,
                        Trace& trace);

}  // namespace kvscope::detail
