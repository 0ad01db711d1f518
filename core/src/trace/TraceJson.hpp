// The JSON document of a trace file (everything but the tensors).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kvscope/Trace.hpp"

namespace kvscope::detail {

nlohmann::json traceToJson(const Trace& trace);
/// Validates every field; errors name `file` and the JSON path (e.g. "steps[2].positions").
Trace traceFromJson(const nlohmann::json& doc, const std::string& file);

}  // namespace kvscope::detail
