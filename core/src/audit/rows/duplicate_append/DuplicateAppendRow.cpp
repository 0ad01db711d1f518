// `duplicate_append` (the method's row 3): a step whose cache grew by more than it fed: the
// previous token fed again, or a layer's records appended twice.
#include "audit/rows/CacheLengthOffset.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"

namespace kvscope::detail::rows {
namespace {

class DuplicateAppendRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::DuplicateAppend,
        "cache length grows by two in one step",
        "duplicate append or a duplicated prompt token",
        MatrixOrigin::Method,
        3,
        AuditStage::Cache,
        {finding::Position},
        {},
        {{"duplicate_append",
          "the new K/V records of `layer` (-1 = every layer) are appended twice at step `step`",
          "cache length grows by two in one step",
          {{"layer", "layer affected (-1 = all)", "-1"},
           {"step", "the step affected", "1"},
           {"request", "request affected (-1 = all)", "-1"}}},
         {"duplicate_prompt_token",
          "the last prompt token is fed again together with the first generated token",
          "cache length grows by two in one step",
          {{"request", "request affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

  void structural(DiagnosisContext& ctx, int64_t, const StepAnalysis& a) const override {
    const TraceStep& st = *a.step;
    if (a.duplicatedPrevious)
      ctx.add(FindingDraft(finding::DuplicateAppend)
                  .at(st)
                  .position(a.cacheRealBefore)
                  .confidence(0.95)
                  .explanation("the step fed " + std::to_string(st.fedIds.size()) +
                               " tokens where the stream continues with " +
                               std::to_string(st.fedIds.size() - 1) + ": the previous token (" +
                               std::to_string(st.fedIds.front()) +
                               ") was fed again, so the cache grew by " +
                               std::to_string(a.appended.empty() ? 0 : a.appended[0]) +
                               " in one step")
                  .evidence({{"fed_tokens", static_cast<double>(st.fedIds.size())},
                             {"expected_tokens", static_cast<double>(st.fedIds.size() - 1)},
                             {"duplicated_token", static_cast<double>(st.fedIds.front())},
                             {"cache_length_before",
                              static_cast<double>(a.lengthBefore.empty() ? 0 : a.lengthBefore[0])},
                             {"cache_length_after",
                              static_cast<double>(a.lengthAfter.empty() ? 0 : a.lengthAfter[0])}}),
              a);
    if (a.duplicateLayer >= 0) {
      const auto l = static_cast<size_t>(a.duplicateLayer);
      ctx.add(FindingDraft(finding::DuplicateAppend)
                  .at(st)
                  .layer(a.duplicateLayer)
                  .position(a.cacheRealBefore)
                  .confidence(0.97)
                  .explanation("layer " + std::to_string(l) + " appended " +
                               std::to_string(a.appended[l]) + " records for " +
                               std::to_string(a.fedCount) +
                               " fed token(s): its cache length went from " +
                               std::to_string(a.lengthBefore[l]) + " to " +
                               std::to_string(a.lengthAfter[l]))
                  .evidence({{"appended", static_cast<double>(a.appended[l])},
                             {"fed_tokens", static_cast<double>(a.fedCount)},
                             {"cache_length_before", static_cast<double>(a.lengthBefore[l])},
                             {"cache_length_after", static_cast<double>(a.lengthAfter[l])}}),
              a);
    }
  }

  bool explainConsequence(const StepAnalysis& a, Finding& position) const override {
    return offsetEqualsExtraRows(a, position, "extra cache entries the duplicate append");
  }
};

}  // namespace

const FailureRow& duplicateAppend() {
  static const DuplicateAppendRow row;
  return row;
}

}  // namespace kvscope::detail::rows
