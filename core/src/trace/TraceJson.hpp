// The JSON document of a trace file apart from its steps: version, engine, mode, model,
// requests, events, faults (docs/trace-format.md). The steps are stored per format
// version: TraceStepColumns (version 2) and TraceStepsV1 (version 1, read only).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvscope/Trace.hpp"

namespace kvscope::detail {

/// Everything but "steps"; "version" is `version`.
nlohmann::json traceHeaderToJson(const Trace& trace, int version);
/// Validates every field but "steps" (which the caller parses); errors name `file` and
/// the JSON path (e.g. "requests[1].prompt_ids"). `version` is the container's version.
Trace traceHeaderFromJson(const nlohmann::json& doc, const std::string& file, int version);

class JsonFieldReader;
/// The document's "recorded_layers" (empty when absent: every layer), validated against
/// model.num_layers: one or more indices, each in [0, numLayers), strictly increasing.
std::vector<int64_t> recordedLayersFromJson(const JsonFieldReader& top, int64_t numLayers);

/// A checksum as 16 lower-case hex digits (version 1 documents).
std::string checksumHex(uint64_t v);

}  // namespace kvscope::detail
