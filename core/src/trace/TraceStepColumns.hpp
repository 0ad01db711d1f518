// The step table of a version 2 trace document: one JSON array ("column") per field, entry
// i belonging to step i, plus each step's place in the packed tensors (docs/trace-format.md).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvscope/Trace.hpp"
#include "trace/TraceStepLayout.hpp"

namespace kvscope::detail {

/// The "steps" object for `trace`, with `layouts[i]` placing step i's tensors.
nlohmann::json stepsToColumns(const Trace& trace, const std::vector<StepLayout>& layouts);

/// Parses and validates the "steps" object into `trace.steps` (declared cache lengths go
/// into the layer records) and returns each step's layout. Errors name `file` and the
/// column, or the column entry (e.g. "steps.positions[3]").
std::vector<StepLayout> stepsFromColumns(const nlohmann::json& steps, const std::string& file, Trace& trace);

}  // namespace kvscope::detail
