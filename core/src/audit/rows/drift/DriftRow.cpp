// `drift` (KV Scope's): a greedy token flipped on a near tie while the logits agree within
// the dtype's tolerance: precision, not a cache bug (the verdict stays clean).
#include <algorithm>

#include "audit/NumberText.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"

namespace kvscope::detail::rows {
namespace {

class DriftRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::Drift,
        "cached and uncached logits differ within the dtype's precision noise",
        "nothing: precision drift, not a cache bug",
        MatrixOrigin::KvScope,
        102,
        AuditStage::Numerics,
        {},
        {"bf16 cached/uncached drift mistaken for a bug, and the reverse (the method's list of "
         "bugs seen in the wild)"},
        {},
        {},
        false};
    return s;
  }

  void beforeDivergence(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a) const override {
    const TraceStep& st = *a.step;
    if (!a.logitsCompared || a.logitsDiverged || st.chosenToken < 0 || a.referenceToken < 0 ||
        ctx.noDrift.count(r))
      return;
    const TraceRequest* req = ctx.trace.findRequest(r);
    if (!req || !req->policy.greedy() || st.chosenToken == a.referenceToken) return;
    // Greedy on logits within tolerance, yet another token: precision flipped a near tie
    // unless the cached row itself prefers the chosen token exactly (then it is policy).
    const auto& lg = st.logits.data;
    const float best = *std::max_element(lg.begin(), lg.end());
    if (lg[static_cast<size_t>(st.chosenToken)] == best &&
        lg[static_cast<size_t>(a.referenceToken)] < best)
      ctx.add(FindingDraft(finding::Drift)
                  .at(st)
                  .position(a.lastRealStreamIndex())
                  .confidence(0.8)
                  .explanation("the greedy token flipped from " + std::to_string(a.referenceToken) +
                               " to " + std::to_string(st.chosenToken) +
                               " on a near tie (top-2 margin " + numberText(a.top2Margin) +
                               ") while the logits agree within tolerance (" +
                               numberText(a.logitError) + " <= " + numberText(a.logitTol) +
                               "): precision drift, not a cache bug")
                  .evidence({{"top2_margin", a.top2Margin},
                             {"max_logit_error", a.logitError},
                             {"tolerance", a.logitTol}}),
              a);
  }
};

}  // namespace

const FailureRow& drift() {
  static const DriftRow row;
  return row;
}

}  // namespace kvscope::detail::rows
