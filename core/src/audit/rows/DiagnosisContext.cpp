#include "audit/rows/DiagnosisContext.hpp"

#include <algorithm>

#include "audit/rows/RowRegistry.hpp"

namespace kvscope::detail {

std::vector<const StepAnalysis*> DiagnosisContext::stepsFrom(int64_t request, const StepAnalysis& a) const {
  std::vector<const StepAnalysis*> from;
  for (const auto& s : analyses.at(request))
    if (&s == &a || !from.empty()) from.push_back(&s);
  return from;
}

void DiagnosisContext::add(const FindingDraft& draft, const StepAnalysis& a) {
  Finding f = draft.finish();
  for (const FailureRow* root : RowRegistry::rows()) {
    const auto& causes = root->spec().causes;
    if (std::find_if(causes.begin(), causes.end(), [&](const char* c) { return f.id == c; }) ==
        causes.end())
      continue;
    if (!findings_.hasFor(root->id(), f.request)) continue;
    if (root->explainConsequence(a, f)) {
      f.causedBy = root->id();
      break;
    }
  }
  findings_.addExisting(f, draft.tickValue());
}

const std::optional<SignatureMatch>& DiagnosisContext::signature(int64_t request,
                                                                 const StepAnalysis& a,
                                                                 const RequestReference& own) {
  auto it = signatures_.find(&a);
  if (it == signatures_.end())
    it = signatures_.emplace(&a, SignatureSearch(refs, tol, references).explain(request, a, own))
             .first;
  return it->second;
}

const std::optional<RewriteMatch>& DiagnosisContext::rewriteOrigin(int64_t request,
                                                                   const StepAnalysis& a) {
  auto it = rewrites_.find(&a);
  if (it == rewrites_.end()) {
    std::optional<RewriteMatch> m;
    const TraceRequest* req = trace.findRequest(request);
    if (const RequestReference* own = req ? refs.get(request, a.version, req->stream()) : nullptr)
      m = RewriteOrigin(tol, references).explain(request, a, *own);
    it = rewrites_.emplace(&a, m).first;
  }
  return it->second;
}

int64_t DiagnosisContext::interleavedRequest(int64_t request, const StepAnalysis& a) const {
  auto prev = previousTick_.find(request);
  const int64_t from = prev == previousTick_.end() ? -1 : prev->second;
  for (const auto& s : trace.steps)
    if (s.request != request && s.tick > from && s.tick <= a.step->tick) return s.request;
  return -1;
}

int64_t DiagnosisContext::streamOwner(int64_t request, const StepAnalysis& a) const {
  int64_t owner = -1;
  const TraceStep& st = *a.step;
  for (const auto& req : trace.requests) {
    if (req.id == request) continue;
    const std::vector<int64_t> s = req.stream();
    bool all = true;
    for (size_t j = 0; j < st.fedIds.size() && all; ++j) {
      const int64_t p = a.streamIndex[j];
      all = p >= 0 && p < static_cast<int64_t>(s.size()) && s[static_cast<size_t>(p)] == st.fedIds[j];
    }
    if (all) owner = req.id;
  }
  return owner;
}

int64_t DiagnosisContext::slotSharer(int64_t request, int64_t slot, int64_t upToTick) const {
  for (const auto& s : trace.steps)
    if (s.request != request && s.slot == slot && s.tick <= upToTick) return s.request;
  return -1;
}

}  // namespace kvscope::detail
