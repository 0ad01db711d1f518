// The trace's sliding-window layers and ring caches (docs/trace-format.md, "Sliding-window
// layers and ring caches"): the document's "layer_kinds" and the I32 tensor `ring_positions`
// [R, Lr, S] holding, per step that records it, the position each ring slot holds.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/SafetensorsWriter.hpp"
#include "kvscope/Trace.hpp"
#include "trace/TraceStepLayout.hpp"

namespace kvscope::detail {

/// Null when no layer is declared (then the field is left out).
nlohmann::json layerKindsToJson(const std::vector<TraceLayerKind>& kinds);
/// Validates `doc["layer_kinds"]` (when present); errors name `file` and the entry, e.g.
/// "layer_kinds[2].window".
std::vector<TraceLayerKind> layerKindsFromJson(const nlohmann::json& doc, const std::string& file,
                                               int64_t numLayers);

/// Gives each step whose ring layers carry slot maps its row of `ring_positions`. Throws
/// UsageError when a step maps some ring layers but not all, or a map has another size.
void planRingRows(const Trace& trace, std::vector<StepLayout>& layouts);
/// Adds `ring_positions` for the rows planRingRows gave (nothing when there are none).
void addRingPositions(const Trace& trace, const std::vector<StepLayout>& layouts,
                      SafetensorsWriter& writer);
/// Validates `ring_positions` against the trace's ring layers and the steps' `ring_row`,
/// and copies each row into the steps' layer records.
void applyRingPositions(const SafetensorsFile& file, const std::vector<StepLayout>& layouts,
                        Trace& trace);

}  // namespace kvscope::detail
