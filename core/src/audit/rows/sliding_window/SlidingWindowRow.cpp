// `sliding_window` (KV Scope's): a divergence that starts once the sequence outgrows the
// model's sliding window and that no layer, position or request explains.
#include "audit/NumberText.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"

namespace kvscope::detail::rows {
namespace {

class SlidingWindowRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::SlidingWindow,
        "divergence starts once the sequence outgrows the sliding window",
        "window trimming and its off-by-one",
        MatrixOrigin::KvScope,
        101,
        AuditStage::Positions,
        {},
        {"sliding-window caches not trimmed or off by one after the window wraps (the method's "
         "list of bugs seen in the wild)"},
        {{"window_off_by_one",
          "the sliding-window mask keeps one key too many (window + 1) in the cached path",
          "layer 1 matches, layer 2 differs",
          {{"layer", "layer affected (-1 = every sliding layer)", "-1"}}}},
        {},
        true};
    return s;
  }

  // A query at position i first sees a window bug at i >= window (one key too many/few).
  bool explainRecords(DiagnosisContext& ctx, int64_t, const StepAnalysis& a,
                      const RequestReference&, const Evidence& base) const override {
    if (ctx.slidingWindow <= 0 || a.firstBadStreamIndex < ctx.slidingWindow) return false;
    Evidence ev = base;
    ev["window"] = static_cast<double>(ctx.slidingWindow);
    ctx.add(FindingDraft(finding::SlidingWindow)
                .at(*a.step)
                .layer(a.firstBadLayer)
                .position(a.firstBadStreamIndex)
                .confidence(0.6)
                .explanation("the first mismatch appears once the sequence (" +
                             std::to_string(a.firstBadStreamIndex + 1) +
                             " tokens) outgrows the sliding window of " +
                             std::to_string(ctx.slidingWindow) +
                             "; no layer, position or request explains the values")
                .evidence(ev),
            a);
    return true;
  }

  bool explainLogits(DiagnosisContext& ctx, int64_t, const StepAnalysis& a,
                     const Evidence& base) const override {
    if (ctx.slidingWindow <= 0 || a.lastRealStreamIndex() < ctx.slidingWindow) return false;
    Evidence ev = base;
    ev["window"] = static_cast<double>(ctx.slidingWindow);
    ctx.add(FindingDraft(finding::SlidingWindow)
                .at(*a.step)
                .position(a.lastRealStreamIndex())
                .confidence(0.7)
                .explanation("every K/V record matches but the logits differ by " +
                             numberText(a.logitError) +
                             " once the sequence outgrows the window of " +
                             std::to_string(ctx.slidingWindow) +
                             ": the attention window keeps the wrong keys")
                .evidence(ev),
            a);
    return true;
  }

  void stageChecks(const StageCheckInput& in, std::vector<std::string>& checks) const override {
    if (in.stage == AuditStage::Positions && in.fired)
      checks.push_back("FAIL: the records diverge once the sequence outgrows the sliding window");
  }
};

}  // namespace

const FailureRow& slidingWindow() {
  static const SlidingWindowRow row;
  return row;
}

}  // namespace kvscope::detail::rows
