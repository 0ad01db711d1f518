// no_rope_layers read inverted where the NoPE choice carries more than the rotation (Llama 4:
// a rotary layer also takes the q/k L2 norm, a NoPE layer the query temperature, and the
// layer pattern may bring the chunking along). The key records alone cannot show it (the L2
// norm's scale is not recoverable from a normed key), so the audit re-derives the run: an
// uncached pass whose layers run as the other kind must reproduce every record and logits row
// of the request from its first divergence on. Candidates: the first diverged layer alone, or
// every layer where no_rope_layers and the family's no_rope_layer_interval rule disagree (a
// path that ignores the list, as mlx-lm's Llama 4 does); each with and without the chunking.
#pragma once

#include "audit/rows/DiagnosisContext.hpp"

namespace kvscope::detail::rows {

/// Adds the nope_layer_rope finding when a candidate reproduces the run from `a` on.
bool explainNopeLayersByRederivation(DiagnosisContext& ctx, int64_t request, const StepAnalysis& a,
                                     const Evidence& base);

}  // namespace kvscope::detail::rows
