// Reads version 1 trace files (per-step tensors `step{i}.logits`, `step{i}.layer{l}.k`, ...
// and a `steps` array of objects; docs/trace-format.md, "Version 1"). Writers produce
// version 2; this keeps traces recorded before it readable.
#pragma once

#include <nlohmann/json.hpp>

#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

/// `doc` is the parsed `kvtrace` metadata document of `file`.
Trace readTraceV1(const nlohmann::json& doc, const SafetensorsFile& file);

}  // namespace kvscope::detail
