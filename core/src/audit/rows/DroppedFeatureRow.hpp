// How the attention-path rows (softcap_dropped, sink_dropped) explain a request's first
// divergence: the shared hypothesis pass without the feature (audit/DroppedFeatureHypothesis)
// from the onset on; a match adds the row's finding (`makeFinding(a, match, evidence)`).
#pragma once

#include "audit/DroppedFeatureHypothesis.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/FailureRow.hpp"

namespace kvscope::detail::rows {

template <class MakeFinding>
bool explainDroppedFeature(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const Evidence& ev,
                           bool logitsOnly, AttentionFeature feature, MakeFinding makeFinding) {
  const auto m = DroppedFeatureHypothesis(feature, ctx.trace, ctx.refs, ctx.tol).explain(ctx.stepsFrom(r, a), logitsOnly);
  if (!m) return false;
  ctx.add(makeFinding(a, *m, ev), a);
  return true;
}

}  // namespace kvscope::detail::rows
