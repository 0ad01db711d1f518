// What the cached engine checks and lays out before a run: the refusals of faults and
// options the model or the requests cannot take (each naming what to do instead), the ring
// slots of its sliding-window layers and the layer kinds its traces declare.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/RingSlots.hpp"
#include "engine/FaultPlan.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/ModelConfig.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

/// Throws UsageError for a fault or option this model or these requests cannot take.
/// `layerWindows`: per layer its sliding window (0: full attention).
void checkEngineRequest(const ModelConfig& cfg, const std::vector<int64_t>& layerWindows,
                        const FaultPlan& faults, const EngineOptions& options,
                        const std::vector<RequestSpec>& specs, int64_t speculativeDrafts);

/// Per layer its ring (as many slots as its window) when `ring`, else none (0 slots).
std::vector<RingSlots> ringLayout(const std::vector<int64_t>& layerWindows, bool ring);

/// The trace's layer_kinds: empty for a model without a sliding layer (files unchanged).
std::vector<TraceLayerKind> traceLayerKinds(const std::vector<int64_t>& layerWindows, bool ring);

}  // namespace kvscope::detail
