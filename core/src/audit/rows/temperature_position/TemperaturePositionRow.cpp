// `temperature_position` (KV Scope's): on a checkpoint with a query temperature (Llama 4's
// attn_temperature_tuning on its NoPE layers, Ministral 3's llama_4_scaling_beta), a
// left-padded request's queries are scaled at their cache index, pads counted, instead of
// their position: transformers' Llama 4 takes arange(seq) + the cache's length (5.x) or
// cache_position (4.x), so a padded row of a batched generate computes another model than
// its solo run. The tempered layer's own records are exact (keys and values come before the
// queries' scale); the next layer's differ where the shift crosses a floor_scale step. Claimed
// when an uncached pass with the temperature taken that many positions later reproduces the run.
#include "audit/HypothesisFit.hpp"
#include "audit/NumberText.hpp"
#include "audit/ReferenceSet.hpp"
#include "audit/rows/AttentionOutputRow.hpp"
#include "audit/rows/DiagnosisContext.hpp"
#include "audit/rows/Rows.hpp"

namespace kvscope::detail::rows {
namespace {

class TemperaturePositionRow final : public AttentionOutputRow {
 public:
  const RowSpec& spec() const override {
    static const RowSpec s{
        finding::TemperaturePosition,
        "a left-padded request diverges from its solo run after a layer with a query temperature "
        "(that layer's K/V records exact, the next layer's wrong); an uncached pass with the "
        "temperature taken at the cache index, the pads counted, reproduces them",
        "which position the query temperature is taken at: the position id, not the cache index "
        "(transformers' Llama 4 scales by arange(seq) + the cache's length, pads included)",
        MatrixOrigin::KvScope,
        119,
        AuditStage::Positions,
        {},
        {"Llama 4's attention temperature taken at the cache index in transformers' batched "
         "generate (docs/audit.md)"},
        {{"temperature_position",
          "the cached path scales `layer`'s queries at their cache index (-1 = every tempered "
          "layer), so a left-padded request counts its pads; needs a checkpoint with a query "
          "temperature (llama4_text) and --batch with prompts of different lengths",
          "the padded request's next layer wrong where the shift crosses a floor_scale step, the "
          "tempered layer's own records exact",
          {{"layer", "layer affected (-1 = every tempered layer)", "-1"},
           {"request", "request affected (-1 = all)", "-1"}}}},
        {},
        true};
    return s;
  }

 private:
  std::string markerWords() const override { return "temperature at the padded index"; }

  bool explain(DiagnosisContext& ctx, int64_t r, const StepAnalysis& a, const Evidence& base,
               bool logitsOnly) const override {
    const ModelConfig* c = ctx.refs.modelConfig();
    if (!c || !(c->queryScaleBeta > 0) || a.structural() || a.referenceMissing) return false;
    const int64_t layer = logitsOnly ? c->numLayers - 1 : a.firstBadLayer - 1;
    if (logitsOnly ? (a.firstBadLayer >= 0 || !a.logitsDiverged) : a.firstBadLayer <= 0) return false;
    if (c->queryScaleNopeOnly && c->ropeOn(layer)) return false;  // the layer takes no temperature
    // The request's left padding: the pads its first step fed before its first real token.
    const auto steps = ctx.trace.stepsOf(r);
    if (steps.empty()) return false;
    int64_t pads = 0;
    for (const uint8_t real : steps.front()->fedMask) {
      if (real) break;
      ++pads;
    }
    if (pads == 0) return false;
    const auto h = hypothesisSteps(ctx.trace, ctx.stepsFrom(r, a));
    if (!h) return false;
    PassHypothesis change;
    change.temperatureShift = pads;
    const auto fit = testHypothesis(ctx.refs, ctx.trace, ctx.tol, *h, change);
    if (!fit) return false;
    const int64_t first = logitsOnly ? a.lastRealStreamIndex() : a.firstBadStreamIndex;
    Evidence ev = base;
    ev["left_pads"] = static_cast<double>(pads);
    ev["tempered_layer"] = static_cast<double>(layer);
    addFitEvidence(ev, *fit);
    std::string ex = (logitsOnly ? "every K/V record is exact but the logits differ" :
                                   "layer " + std::to_string(layer) + "'s K/V records are exact but layer " +
                                       std::to_string(layer + 1) + "'s differ") +
                     " from position " + std::to_string(first) + " of this request, which ran left-padded by " +
                     std::to_string(pads) + "; an uncached pass whose query temperature is taken " +
                     std::to_string(pads) + " positions later (at the cache index, the pads counted) reproduces " +
                     fitText(*fit) + ": the engine scales the queries by where they sit in the padded cache, "
                     "so a batched request computes another model than its solo run";
    ctx.add(FindingDraft(finding::TemperaturePosition)
                .at(*a.step)
                .layer(layer)
                .position(first)
                .confidence(0.9)
                .explanation(ex)
                .evidence(std::move(ev)),
            a);
    return true;
  }
};

}  // namespace

const FailureRow& temperaturePosition() {
  static const TemperaturePositionRow row;
  return row;
}

}  // namespace kvscope::detail::rows
