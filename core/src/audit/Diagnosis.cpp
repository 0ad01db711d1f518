#include "audit/Diagnosis.hpp"

#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/RowRegistry.hpp"

namespace kvscope::detail {

void Diagnosis::explainDivergence(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a) {
  const TraceRequest* req = trace_.findRequest(r);
  if (!req) return;
  const RequestReference* own = refs_.get(r, a.version, req->stream());
  if (!own) return;
  const auto& rows = RowRegistry::rows();
  Evidence ev{{"max_logit_error", a.logitError}};
  if (a.stateFirst()) {  // a recurrent layer's state went wrong first
    const auto l = static_cast<size_t>(a.firstBadStateLayer);
    Evidence sev = ev;
    sev["state_error"] = a.stateError[l];
    sev["state_tolerance"] = a.stateTol[l];
    for (const FailureRow* row : rows)
      if (row->explainState(ctx, r, a, *own, sev)) return;
    if (a.firstBadLayer < 0 && !a.logitsDiverged) return;  // the state alone: stage 2 says so
  }
  if (a.firstBadLayer >= 0) {
    const auto l = static_cast<size_t>(a.firstBadLayer);
    ev["layer_key_error"] = a.keyError[l];
    ev["layer_value_error"] = a.valueError[l];
    if (l > 0) ev["previous_layer_key_error"] = a.keyError[l - 1];
    for (const FailureRow* row : rows)
      if (row->explainRecords(ctx, r, a, *own, ev)) return;
    for (const FailureRow* row : rows)
      if (row->nearestRecords(ctx, r, a, *own, ev)) return;
    return;
  }
  // Every record matches but the logits do not: the attention read something else.
  for (const FailureRow* row : rows)
    if (row->explainLogits(ctx, r, a, ev)) return;
  for (const FailureRow* row : rows)
    if (row->nearestLogits(ctx, r, a, ev)) return;
}

void Diagnosis::run(FindingBuilder& f) {
  DiagnosisContext ctx(trace_, refs_, tol_, analyses_, references_, slidingWindow_, noDrift_, f);
  const auto& rows = RowRegistry::rows();
  for (const auto& [r, steps] : analyses_) {
    bool valueDone = false, structuralSeen = false;
    ctx.startRequest(r);
    for (const auto& a : steps) {
      if (a.structural()) {
        for (const FailureRow* row : rows) row->structural(ctx, r, a);
        structuralSeen = true;
      } else if (!valueDone && !structuralSeen && (a.firstBadLayer >= 0 || a.firstBadStateLayer >= 0 || a.logitsDiverged) &&
                 !a.referenceMissing) {
        explainDivergence(ctx, r, a);
        valueDone = true;
      }
      // After a divergence, later steps are its consequences (no drift).
      if (!valueDone && !structuralSeen)
        for (const FailureRow* row : rows) row->beforeDivergence(ctx, r, a);
      ctx.stepDone(r, a);
    }
  }
}

}  // namespace kvscope::detail
