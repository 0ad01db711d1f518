// `reference` (KV Scope's): the uncached reference itself is wrong or does not fit the run
// (stage 1), or layer 0's records match nothing the reference computes.
#include "audit/NumberText.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"
#include "audit/rows/reference/ReferenceFinding.hpp"

namespace kvscope::detail {

Finding referenceFinding(const std::string& explanation, std::map<std::string, double> ev) {
  return FindingDraft(finding::Reference)
      .tick(-1)
      .confidence(1.0)
      .explanation(explanation)
      .evidence(std::move(ev))
      .finish();
}

namespace rows {
namespace {

class ReferenceRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{finding::Reference,
                           "the uncached reference itself is wrong or does not fit the run",
                           "checkpoint, vocabulary and tokenizer",
                           MatrixOrigin::KvScope,
                           100,
                           AuditStage::Reference,
                           {},
                           {},
                           {},
                           {},
                           true};
    return s;
  }

  bool nearestRecords(DiagnosisContext& ctx, int64_t, const StepAnalysis& a,
                      const RequestReference&, const Evidence& ev) const override {
    if (a.firstBadLayer != 0) return false;
    ctx.add(FindingDraft(finding::Reference)
                .at(*a.step)
                .layer(0)
                .position(a.firstBadStreamIndex)
                .confidence(0.5)
                .explanation("layer 0's records differ from the reference (keys by " + numberText(a.keyError[0]) +
                             ", values by " + numberText(a.valueError.empty() ? 0.0 : a.valueError[0]) +
                             ") and match no other position or request: were they computed with "
                             "these weights?")
                .evidence(ev),
            a);
    return true;
  }
};

}  // namespace

const FailureRow& reference() {
  static const ReferenceRow row;
  return row;
}

}  // namespace rows
}  // namespace kvscope::detail
