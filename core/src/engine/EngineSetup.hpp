// What the cached engine checks and lays out before a run: the refusals of faults and
// options the model or the requests cannot take (each naming what to do instead), the ring
// slots of its sliding-window layers and the layer kinds its traces declare.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/RingSlots.hpp"
#include "engine/FaultPlan.hpp"
#include "engine/RequestState.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/ModelConfig.hpp"
#include "kvscope/Trace.hpp"
#include "model/ModelImpl.hpp"

namespace kvscope::detail {

/// Throws UsageError for a fault or option this model or these requests cannot take.
/// `layerWindows`: per layer its sliding window (0: full attention).
void checkEngineRequest(const ModelConfig& cfg, const std::vector<int64_t>& layerWindows,
                        const FaultPlan& faults, const EngineOptions& options,
                        const std::vector<RequestSpec>& specs, int64_t speculativeDrafts);

/// Refuses (OutOfMemoryError naming the figures) a run of `specs` whose cache holds `capacity`
/// entries per slot when it cannot fit, before the cache or any activation is allocated.
/// Returns MemoryNeed::check's note where the weights do not all fit beside the run.
std::string checkEngineMemory(const ModelImpl& impl, const std::vector<RequestSpec>& specs, const EngineOptions& options,
                       int64_t capacity);

/// Per layer its ring (as many slots as its window) when `ring`, else none (0 slots).
std::vector<RingSlots> ringLayout(const std::vector<int64_t>& layerWindows, bool ring);

/// The trace's layer_kinds: empty for a model without a sliding, chunked, recurrent or latent
/// layer (files unchanged). `latent`: every layer holds latent rows (MLA).
std::vector<TraceLayerKind> traceLayerKinds(const std::vector<int64_t>& layerWindows,
                                            const std::vector<int64_t>& layerChunks, bool ring,
                                            const std::vector<bool>& recurrentLayers = {}, bool latent = false);

/// What a finished run was like, for the reasons its faults never fired.
FaultPlan::RunFacts runFacts(const std::vector<RequestState>& requests, const Trace& trace,
                             int64_t lastTick, bool prefixCache, int64_t prefillChunk,
                             const std::vector<int64_t>& layerWindows,
                             const std::vector<int64_t>& layerChunks);

/// Whether `a` and `b` choose different tokens from `logits` (each from a copy of `rng`).
bool choiceDiffers(const std::vector<float>& logits, const SamplingPolicy& a,
                   const SamplingPolicy& b, const RequestRng& rng);

/// The draft source of speculative decoding, prompt lookup (n-gram): the `k` tokens that
/// followed the latest earlier occurrence of the stream's last two (else last one) tokens;
/// without a match, the last token repeated.
std::vector<int64_t> promptLookupDrafts(const RequestState& r, size_t k);

}  // namespace kvscope::detail
