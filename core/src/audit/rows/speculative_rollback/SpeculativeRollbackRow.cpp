// `speculative_rollback` (KV Scope's): rejected draft tokens whose K/V rows stay in the cache
// after verification, so the cache length runs ahead of the accepted tokens.
#include <algorithm>

#include "audit/ColumnDiff.hpp"
#include "audit/NumberText.hpp"
#include "audit/rows/CacheLengthOffset.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"

namespace kvscope::detail::rows {
namespace {

class SpeculativeRollbackRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::SpeculativeRollback,
        "after speculative decoding the cache length exceeds the accepted tokens by the "
        "rejected drafts",
        "the rollback (cache trim) after draft verification",
        MatrixOrigin::KvScope,
        103,
        AuditStage::Cache,
        {finding::Position},
        {"transformers' assisted generation: crop() a no-op for sliding-window and quantised "
         "caches; vLLM and SGLang slot allocators that keep rejected drafts' slots "
         "(docs/audit.md)"},
        {{"speculative_rollback",
          "speculative decoding (`draft` draft tokens per step, enabled if --speculative is not "
          "given) whose rollback is skipped from step `step` on: the rejected drafts' K/V rows "
          "of `layer` (-1 = every layer) stay in the cache",
          "cache length exceeds the accepted tokens by the rejected drafts",
          {{"draft", "draft tokens proposed per decode step (when speculation is not on already)",
            "3"},
           {"step", "first step whose rollback is skipped", "1"},
           {"layer", "layer not rolled back (-1 = all)", "-1"},
           {"request", "request affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

  void structural(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a) const override {
    if (a.rollbackLayer < 0) return;
    if (ctx.hasFor(finding::SpeculativeRollback, r)) return;  // the onset carries the evidence
    const TraceStep& st = *a.step;
    const auto l = static_cast<size_t>(a.rollbackLayer);
    const auto fed = static_cast<int64_t>(st.fedIds.size());
    const int64_t firstRejected = fed - a.rejected;  // fed entry of the first rejected draft
    // Stream position right after the last accepted token: where the first rejected draft sat.
    const int64_t at = a.cacheRealBefore + static_cast<int64_t>(st.realColumns().size());
    Evidence ev{
        {"draft_tokens", static_cast<double>(st.draftCount)},
        {"accepted", static_cast<double>(st.acceptedCount)},
        {"rejected", static_cast<double>(a.rejected)},
        {"cache_length_before", static_cast<double>(a.lengthBefore[l])},
        {"cache_length_after", static_cast<double>(a.lengthAfter[l])},
        {"expected_cache_length", static_cast<double>(a.lengthBefore[l] + fed - a.rejected)},
        {"extra_rows",
         static_cast<double>(a.lengthAfter[l] - (a.lengthBefore[l] + fed - a.rejected))},
        {"first_rejected_position", static_cast<double>(at)},
        {"layers_not_rolled_back", static_cast<double>(a.rollbackLayers.size())}};
    std::string layers;
    for (int x : a.rollbackLayers) layers += (layers.empty() ? "" : ", ") + std::to_string(x);
    std::string ex = "the step verified " + std::to_string(st.draftCount) +
                     " draft token(s) and accepted " + std::to_string(st.acceptedCount) +
                     ", but layer " + std::to_string(l) + "'s cache length went from " +
                     std::to_string(a.lengthBefore[l]) + " to " + std::to_string(a.lengthAfter[l]) +
                     " instead of " + std::to_string(a.lengthBefore[l] + fed - a.rejected) +
                     ": the " + std::to_string(a.rejected) +
                     " rejected draft(s) were not rolled back (layers " + layers + ")";
    // Whose rows are the extra ones? The rejected drafts' own projections at those positions,
    // from an uncached pass over the accepted stream followed by the rejected drafts.
    double vsDraft = 0, vsStream = 0, tolerance = 0;
    bool checked = false, streamCompared = false;
    const TraceRequest* req = ctx.trace.findRequest(r);
    const TraceLayerRecord& rec = st.layers[l];
    if (req && rec.keys.shape.size() == 3 && rec.keys.shape[1] >= fed) {
      const std::vector<int64_t> stream = req->stream();
      std::vector<int64_t> ids(
          stream.begin(),
          stream.begin() + std::min<int64_t>(at, static_cast<int64_t>(stream.size())));
      ids.insert(ids.end(), st.fedIds.begin() + firstRejected, st.fedIds.end());
      if (static_cast<int64_t>(ids.size()) == at + a.rejected) {
        if (auto run = ctx.refs.branch(ids, a.version)) {
          const RequestReference* own = ctx.refs.get(r, a.version, stream);
          for (int64_t j = 0; j < a.rejected; ++j) {
            const int64_t col = firstRejected + j, p = at + j;
            for (int kind = 0; kind < 2; ++kind) {
              const FloatTensor& mine = kind ? rec.values : rec.keys;
              const FloatTensor& draft = kind ? run->values[l] : run->keys[l];
              const FloatTensor* next =
                  own && own->keys.size() > l ? (kind ? &own->values[l] : &own->keys[l]) : nullptr;
              const bool inStream = next && p < next->shape[1];
              const ColumnDiff vs = columnDiff(mine, col, draft, p);
              vsDraft = std::max(vsDraft, vs.err);
              if (inStream) vsStream = std::max(vsStream, columnDiff(mine, col, *next, p).err);
              streamCompared = streamCompared || inStream;
              tolerance = std::max(tolerance, ctx.tol.forRecord(static_cast<int64_t>(l), p, vs.mag));
            }
          }
          checked = true;
        }
      }
    }
    if (checked) {
      ev["extra_rows_vs_draft_projection"] = vsDraft;
      ev["tolerance"] = tolerance;
      ex += "; the extra rows equal the rejected drafts' projections at positions " +
            std::to_string(at) + ".." + std::to_string(at + a.rejected - 1) + " (max diff " +
            numberText(vsDraft) + ")";
      if (streamCompared) {
        ev["extra_rows_vs_stream_reference"] = vsStream;
        ex += ", not the stream's tokens there (" + numberText(vsStream) + ")";
      }
    } else {
      ex +=
          "; their values were not compared with the drafts' projections (no model: trace+trace "
          "mode)";
    }
    ex += "; later steps attend over them";
    const bool valuesAgree = checked && vsDraft <= tolerance;
    ctx.add(FindingDraft(finding::SpeculativeRollback)
              .at(st)
              .layer(a.rollbackLayer)
              .position(at)
              .confidence(valuesAgree ? 0.99 : 0.9)
              .explanation(ex)
              .evidence(ev), a);
  }

  bool explainConsequence(const StepAnalysis& a, Finding& position) const override {
    return offsetEqualsExtraRows(a, position, "rejected drafts' rows the skipped rollback");
  }
};

}  // namespace

const FailureRow& speculativeRollback() {
  static const SpeculativeRollbackRow row;
  return row;
}

}  // namespace kvscope::detail::rows
