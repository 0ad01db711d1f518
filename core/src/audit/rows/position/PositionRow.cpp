// `position` (the method's row 1): position ids that do not continue from the cache, fed
// tokens that are not the request's stream, or keys computed at another position.
#include "audit/FindingBuilder.hpp"
#include "audit/NumberText.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"

namespace kvscope::detail::rows {
namespace {

class PositionRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::Position,
        "mismatch begins at a token together with a position offset",
        "position index or token ownership",
        MatrixOrigin::Method,
        1,
        AuditStage::Positions,
        {},
        {"left-padded batches fed arange positions instead of cumsum(mask) - 1 (the method's "
         "list of bugs seen in the wild)"},
        {{"wrong_position",
          "decode positions are off by `offset` (or restart at 0 with restart=1) from step `step` "
          "on",
          "mismatch begins at a token together with a position offset",
          {{"offset", "added to every position id", "1"},
           {"restart", "1: positions restart at 0 instead of continuing", "0"},
           {"step", "first step affected (0 = prefill)", "1"},
           {"request", "request affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

  void structural(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a) const override {
    const TraceStep& st = *a.step;
    if (!a.positionsOk && !ctx.positionsClaimed(a)) {
      Evidence ev{{"offset", static_cast<double>(a.positionOffset)},
                  {"expected_position", static_cast<double>(a.expectedPosition)},
                  {"recorded_position", static_cast<double>(a.recordedPosition)},
                  {"max_logit_error", a.logitError}};
      std::string ex = "position ids do not continue from the cache: expected " +
                       std::to_string(a.expectedPosition) + ", recorded " +
                       std::to_string(a.recordedPosition) + " (offset " +
                       std::to_string(a.positionOffset) + ")";
      if (!st.fedMask.empty())
        ex += "; left-padded input: positions must follow cumsum(mask) - 1, not arange";
      if (a.logitsCompared) ex += "; logits moved by " + numberText(a.logitError);
      ctx.add(FindingDraft(finding::Position)
                  .at(st)
                  .layer(0)
                  .position(a.expectedPosition)
                  .confidence(0.95)
                  .explanation(ex)
                  .evidence(ev),
              a);
    }
    // Fed tokens that belong to no other request's stream: token ownership.
    if (a.streamMismatch && ctx.streamOwner(r, a) < 0)
      ctx.add(FindingDraft(finding::Position)
                  .at(st)
                  .position(a.cacheRealBefore)
                  .confidence(0.6)
                  .explanation("the fed tokens differ from this request's prompt + generated "
                               "stream at index " +
                               std::to_string(a.cacheRealBefore) + " (token ownership)")
                  .evidence({{"stream_index", static_cast<double>(a.cacheRealBefore)}}),
              a);
  }

  bool explainRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a,
                      const RequestReference& own, const Evidence& base) const override {
    const auto& m = ctx.signature(r, a, own);
    if (!m || m->kind != finding::Position) return false;
    const int64_t expected =
        a.cacheRealBefore + a.firstBadRealOrdinal;  // real tokens, not padding columns
    Evidence ev = base;
    ev["match_error"] = m->error;
    ev["own_reference_error"] = m->ownError;
    ev["offset"] = static_cast<double>(m->position - expected);
    ev["computed_at_position"] = static_cast<double>(m->position);
    ctx.add(FindingDraft(finding::Position)
                .at(*a.step)
                .layer(0)
                .position(a.firstBadStreamIndex)
                .confidence(0.9)
                .explanation("layer 0's key for the token at stream position " +
                             std::to_string(a.firstBadStreamIndex) +
                             " equals the reference key of the same token at position " +
                             std::to_string(m->position) + " (offset " +
                             std::to_string(m->position - expected) +
                             ") although the trace records the right position ids: the engine "
                             "applied other positions; logits moved by " +
                             numberText(a.logitError))
                .evidence(ev),
            a);
    return true;
  }

  // Nothing matched the record, but the same forward's earlier layer-0 records match their
  // reference: the weights and positions that computed them are right, so this entry holds
  // another token's row (a cell a prompt cache reused from a sequence that did not share
  // the token, as a saved llama.cpp slot of one sequence shows it): token ownership, not the
  // checkpoint (`reference` claims a layer 0 that is wrong from its first record).
  bool nearestRecords(DiagnosisContext& ctx, int64_t, const StepAnalysis& a,
                      const RequestReference&, const Evidence& base) const override {
    if (a.firstBadLayer != 0 || a.firstBadRealOrdinal <= 0) return false;
    Evidence ev = base;
    ev["records_matching_before"] = static_cast<double>(a.firstBadRealOrdinal);
    ctx.add(FindingDraft(finding::Position)
                .at(*a.step)
                .layer(0)
                .position(a.firstBadStreamIndex)
                .confidence(0.5)
                .explanation("layer 0's record at stream position " + std::to_string(a.firstBadStreamIndex) +
                             " differs from the reference (error " + numberText(a.keyError[0]) + ") while the " +
                             std::to_string(a.firstBadRealOrdinal) +
                             " records the same forward holds before it match theirs: that entry is not this "
                             "token's at this position (token ownership: a cache cell reused from a sequence "
                             "or prompt that did not share the token?), and no other position or request of "
                             "the trace holds it")
                .evidence(ev),
            a);
    return true;
  }

  void stageChecks(const StageCheckInput& in, std::vector<std::string>& checks) const override {
    if (in.stage != AuditStage::Positions) return;
    // Two kinds of position finding: an offset, and token ownership (nearestRecords above).
    const auto kind = [&](bool ownership) {
      return in.findings.any([&](const Finding& f) {
        return f.id == finding::Position && f.evidence.count("records_matching_before") == (ownership ? 1u : 0u);
      });
    };
    if (kind(true)) checks.push_back("FAIL: a cache entry holds another token's row (token ownership)");
    checks.push_back(kind(false) ? "FAIL: decode positions do not continue from the prompt length"
                                 : "ok: decode positions continue from the prompt length");
  }
};

}  // namespace

const FailureRow& position() {
  static const PositionRow row;
  return row;
}

}  // namespace kvscope::detail::rows
