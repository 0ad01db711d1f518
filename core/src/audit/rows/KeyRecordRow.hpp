// How the rotation rows whose evidence needs only the checkpoint's config (nope_layer_rope,
// layer_rope_theta, partial_rotary) explain a request's first divergence: the evidence class
// `E` (E(config, tol), applies(), explain(steps, own), E::finding(a, match, evidence))
// re-derives every key record from that step on; a match adds its finding.
#pragma once

#include "audit/ReferenceSet.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/FailureRow.hpp"

namespace kvscope::detail::rows {

template <class E>
bool explainKeyRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a,
                       const RequestReference& own, const Evidence& ev) {
  const ModelConfig* config = ctx.refs.modelConfig();
  if (!config || a.firstBadLayer < 0) return false;
  const E evidence(*config, ctx.tol);
  if (!evidence.applies()) return false;
  const auto m = evidence.explain(ctx.stepsFrom(r, a), own);
  if (!m) return false;
  ctx.add(E::finding(a, *m, ev), a);
  return true;
}

}  // namespace kvscope::detail::rows
