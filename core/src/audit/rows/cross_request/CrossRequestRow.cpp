// `cross_request` (the method's row 4): another request's tokens, records or cache rows in a
// request's own cache or stream.
#include "audit/NumberText.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"

namespace kvscope::detail::rows {
namespace {

class CrossRequestRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::CrossRequest,
        "a batch row changes when another request arrives",
        "cache mixing across the batch or request axes",
        MatrixOrigin::Method,
        4,
        AuditStage::Positions,
        {},
        {"prefix-cache blocks read by another request before they were written (the method's "
         "list of bugs seen in the wild)"},
        {{"cross_request",
          "request `request` is given request `victim`'s cache row when it arrives and "
          "overwrites it",
          "a batch row changes when another request arrives",
          {{"request", "the arriving request", "1"},
           {"victim", "the request whose row is reused", "0"}}},
         {"batch_row_mix",
          "in a batched forward, row `from`'s new records are written into row `to` as well",
          "a batch row changes when another request arrives",
          {{"from", "source request", "0"},
           {"to", "request whose row is overwritten", "1"},
           {"step", "first step affected", "1"},
           {"layer", "layer affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

  void structural(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a) const override {
    const TraceStep& st = *a.step;
    if (a.streamMismatch)
      if (const int64_t owner = ctx.streamOwner(r, a); owner >= 0)
        ctx.add(FindingDraft(finding::CrossRequest)
                    .at(st)
                    .position(a.cacheRealBefore)
                    .confidence(0.9)
                    .explanation("the tokens fed at this step belong to request " +
                                 std::to_string(owner) + "'s stream, not this request's")
                    .evidence({{"other_request", static_cast<double>(owner)}}),
                a);
    if (a.rewrittenLayer >= 0) rewritten(ctx, r, a);
  }

  bool explainRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a,
                      const RequestReference& own, const Evidence& base) const override {
    const auto& m = ctx.signature(r, a, own);
    if (!m || m->kind != finding::CrossRequest) return false;
    Evidence ev = base;
    ev["match_error"] = m->error;
    ev["own_reference_error"] = m->ownError;
    ev["other_request"] = static_cast<double>(m->request);
    ev["other_position"] = static_cast<double>(m->position);
    ctx.add(FindingDraft(finding::CrossRequest)
                .at(*a.step)
                .layer(a.firstBadLayer)
                .position(a.firstBadStreamIndex)
                .confidence(0.95)
                .explanation("layer " + std::to_string(a.firstBadLayer) +
                             "'s records for this request equal request " +
                             std::to_string(m->request) + "'s reference at its position " +
                             std::to_string(m->position) + " (max diff " + numberText(m->error) +
                             "): another request's row was written into this one")
                .evidence(ev),
            a);
    return true;
  }

  // Every record matches but the logits do not: the attention read something else.
  bool nearestLogits(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a,
                     const Evidence& base) const override {
    const int64_t other = ctx.interleavedRequest(r, a);
    Evidence ev = base;
    if (other >= 0) ev["other_request"] = static_cast<double>(other);
    ctx.add(FindingDraft(finding::CrossRequest)
                .at(*a.step)
                .position(a.lastRealStreamIndex())
                .confidence(other >= 0 ? 0.6 : 0.4)
                .explanation("every new K/V record matches the reference but the logits differ "
                             "by " +
                             numberText(a.logitError) +
                             ": the attention read cache rows that are not this request's "
                             "records" +
                             (other >= 0 ? " (request " + std::to_string(other) + " ran in between)"
                                         : ""))
                .evidence(ev),
            a);
    return true;
  }

  void stageChecks(const StageCheckInput& in, std::vector<std::string>& checks) const override {
    if (in.stage != AuditStage::Positions) return;
    checks.push_back(in.fired
                         ? "FAIL: another request wrote into a request's cache rows or token stream"
                         : "ok: each request owns its cache rows and token stream");
  }

 private:
  // Earlier rows of a layer changed: another request's reference, or nothing known.
  static void rewritten(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a) {
    const TraceStep& st = *a.step;
    const auto l = a.rewrittenLayer;
    const std::string rows = rewrittenEntriesText(a);
    if (const auto& m = ctx.rewriteOrigin(r, a)) {
      if (m->kind != finding::CrossRequest) return;  // another row's (wrong_layer)
      ctx.add(FindingDraft(finding::CrossRequest)
                  .at(st)
                  .layer(l)
                  .confidence(0.97)
                  .explanation("layer " + std::to_string(l) + "'s " + rows +
                               " were overwritten since the previous step: they equal request " +
                               std::to_string(m->otherRequest) + "'s reference" +
                               (m->sourceLayer != l ? " of layer " + std::to_string(m->sourceLayer)
                                                    : std::string()) +
                               " at the same positions (max diff " + numberText(m->error) +
                               ", own reference " + numberText(m->ownError) +
                               "): another request was written into this request's cache" +
                               (a.logitsCompared
                                    ? "; this request's logits moved by " + numberText(a.logitError)
                                    : std::string()))
                  .evidence({{"rewritten_entries", static_cast<double>(a.rewrittenColumns.size())},
                             {"rows_compared", static_cast<double>(m->rows)},
                             {"match_error", m->error},
                             {"own_reference_error", m->ownError},
                             {"max_logit_error", a.logitError},
                             {"other_request", static_cast<double>(m->otherRequest)},
                             {"other_layer", static_cast<double>(m->sourceLayer)}}),
              a);
      return;
    }
    const int64_t other = ctx.interleavedRequest(r, a);
    const int64_t sharer = ctx.slotSharer(r, st.slot, st.tick);
    Evidence ev{{"layer", static_cast<double>(l)}, {"slot", static_cast<double>(st.slot)}};
    std::string ex = "earlier cache rows of layer " + std::to_string(l) +
                     " changed since the previous step (the recorded cache no longer matches the "
                     "appended records)";
    if (!a.rewrittenColumns.empty()) {
      ex += "; snapshot " + rows + " differ and match no other layer's or request's reference";
      ev["rewritten_entries"] = static_cast<double>(a.rewrittenColumns.size());
    }
    if (sharer >= 0) {
      ex += "; request " + std::to_string(sharer) + " used the same cache row (slot " +
            std::to_string(st.slot) + ")";
      ev["other_request"] = static_cast<double>(sharer);
    } else if (other >= 0) {
      ex += "; request " + std::to_string(other) + " ran in between";
      ev["other_request"] = static_cast<double>(other);
    }
    if (a.logitsCompared) {
      ex += "; this request's logits moved by " + numberText(a.logitError);
      ev["max_logit_error"] = a.logitError;
    }
    ctx.add(FindingDraft(finding::CrossRequest)
                .at(st)
                .layer(l)
                .confidence(sharer >= 0  ? 0.9
                            : other >= 0 ? 0.8
                                         : 0.5)
                .explanation(ex)
                .evidence(ev),
            a);
  }
};

}  // namespace

const FailureRow& crossRequest() {
  static const CrossRequestRow row;
  return row;
}

}  // namespace kvscope::detail::rows
