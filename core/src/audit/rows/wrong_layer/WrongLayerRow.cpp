// `wrong_layer` (the method's row 2): a layer whose cache stores (and reads back) another
// layer's K/V, from its new records (signature search) or its whole rewritten cache.
#include "audit/NumberText.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"

namespace kvscope::detail::rows {
namespace {

class WrongLayerRow final : public FailureRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::WrongLayer,
        "layer 1 matches, layer 2 differs",
        "layer 2's cache source and append",
        MatrixOrigin::Method,
        2,
        AuditStage::Cache,
        {},
        {"an engine's cache update() replacing layer 1's whole tensor with a copy of layer 0's "
         "(the method's worked case)"},
        {{"wrong_layer",
          "layer `layer` stores (and so reads back) layer `source`'s K/V records",
          "layer 1 matches, layer 2 differs",
          {{"layer", "the layer whose cache is written wrongly", "1"},
           {"source", "the layer whose records it stores", "0"},
           {"step", "first step affected", "0"},
           {"request", "request affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

  // The whole cache of a layer replaced by another layer's rows (snapshots show it).
  void structural(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a) const override {
    if (a.rewrittenLayer < 0) return;
    const auto& m = ctx.rewriteOrigin(r, a);
    if (!m || m->kind != finding::WrongLayer) return;
    const auto l = a.rewrittenLayer;
    ctx.add(FindingDraft(finding::WrongLayer)
                .at(*a.step)
                .layer(l)
                .confidence(0.97)
                .explanation("layer " + std::to_string(l) +
                             "'s whole cache was replaced at this step: its " + rewrittenEntriesText(a) +
                             " (earlier rows included) equal layer " +
                             std::to_string(m->sourceLayer) +
                             "'s reference projections at the same positions (max diff " +
                             numberText(m->error) + ") instead of its own (max diff " +
                             numberText(m->ownError) + "); the cache length stayed right. Layer " +
                             std::to_string(l) + " stores and reads layer " +
                             std::to_string(m->sourceLayer) + "'s K/V")
                .evidence({{"rewritten_entries", static_cast<double>(a.rewrittenColumns.size())},
                           {"rows_compared", static_cast<double>(m->rows)},
                           {"match_error", m->error},
                           {"own_reference_error", m->ownError},
                           {"max_logit_error", a.logitError},
                           {"source_layer", static_cast<double>(m->sourceLayer)}}),
            a);
  }

  bool explainRecords(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a,
                      const RequestReference& own, const Evidence& base) const override {
    const auto& m = ctx.signature(r, a, own);
    if (!m || m->kind != finding::WrongLayer) return false;
    const auto l = static_cast<size_t>(a.firstBadLayer);
    Evidence ev = base;
    ev["match_error"] = m->error;
    ev["own_reference_error"] = m->ownError;
    ev["source_layer"] = static_cast<double>(m->layer);
    ctx.add(FindingDraft(finding::WrongLayer)
                .at(*a.step)
                .layer(a.firstBadLayer)
                .position(a.firstBadStreamIndex)
                .confidence(0.95)
                .explanation("layers 0.." + std::to_string(l - (l > 0 ? 1 : 0)) +
                             (l > 0 ? " match the reference; " : "; ") + "layer " +
                             std::to_string(l) + "'s new K/V records equal layer " +
                             std::to_string(m->layer) + "'s reference projections (max diff " +
                             numberText(m->error) + ") instead of its own (max diff " +
                             numberText(m->ownError) + "): layer " + std::to_string(l) +
                             " stores and reads layer " + std::to_string(m->layer) +
                             "'s cache; logits moved by " + numberText(a.logitError))
                .evidence(ev),
            a);
    return true;
  }

  // Layers below match and this one differs, with no other layer's records to blame.
  bool nearestRecords(DiagnosisContext& ctx, int64_t, const StepAnalysis& a,
                      const RequestReference&, const Evidence& ev) const override {
    const auto l = static_cast<size_t>(a.firstBadLayer);
    if (l == 0) return false;
    ctx.add(FindingDraft(finding::WrongLayer)
                .at(*a.step)
                .layer(a.firstBadLayer)
                .position(a.firstBadStreamIndex)
                .confidence(0.5)
                .explanation("layers below " + std::to_string(l) +
                             " match the reference and layer " + std::to_string(l) +
                             " differs (key error " + numberText(a.keyError[l]) +
                             "), but no other layer's records match: check what layer " +
                             std::to_string(l - 1) + "'s attention read from the cache")
                .evidence(ev),
            a);
    return true;
  }

  // The method speaks of "layer 1" and "layer 2" as an example; a finding names its layers
  // (the matrix itself keeps the method's words).
  void describe(Finding& f) const override {
    FailureRow::describe(f);
    if (f.layer < 0) return;
    f.firstCheck = "layer " + std::to_string(f.layer) + "'s cache source and append";
    f.matrixRow = f.layer > 0 ? "layer " + std::to_string(f.layer - 1) + " matches, layer " +
                                    std::to_string(f.layer) + " differs"
                              : "layer 0 differs";
  }
};

}  // namespace

const FailureRow& wrongLayer() {
  static const WrongLayerRow row;
  return row;
}

}  // namespace kvscope::detail::rows
