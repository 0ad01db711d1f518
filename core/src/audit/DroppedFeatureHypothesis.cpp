#include "audit/DroppedFeatureHypothesis.hpp"

#include <algorithm>
#include <cmath>

#include "audit/HypothesisFit.hpp"
#include "audit/NumberText.hpp"

namespace kvscope::detail {

namespace {
// A record error below this fraction of its tolerance is float noise.
constexpr double kNoiseFraction = 0.05;
}  // namespace

bool DroppedFeatureHypothesis::test(const HypothesisSteps& h, int64_t from, bool above,
                                    DroppedFeatureMatch& m) const {
  const ModelConfig& config = *refs_.modelConfig();
  PassHypothesis change;
  for (int64_t l = from; l <= (above ? config.numLayers - 1 : from); ++l) change.droppedFrom[feature_][l] = m.onset;
  const auto fit = testHypothesis(refs_, trace_, tol_, h, change);
  if (!fit) return false;
  m.layersAbove = above;
  m.records = fit->records;
  m.logitRows = fit->logitRows;
  m.hypothesisError = fit->error;
  m.hypothesisLogitError = fit->logitError;
  m.tolerance = fit->tolerance;
  return true;
}

std::optional<DroppedFeatureMatch> DroppedFeatureHypothesis::explain(
    const std::vector<const StepAnalysis*>& steps, bool logitsOnly) const {
  const ModelConfig* config = refs_.modelConfig();
  if (!config || steps.empty()) return std::nullopt;
  const StepAnalysis& first = *steps.front();
  if (first.structural() || first.referenceMissing) return std::nullopt;
  const int64_t n = config->numLayers;
  DroppedFeatureMatch m;
  if (logitsOnly) {
    if (first.firstBadLayer >= 0 || !first.logitsDiverged) return std::nullopt;
    m.layer = n - 1;  // only the last layer's attention reaches nothing but the logits
    m.firstPosition = first.lastRealStreamIndex();
  } else {
    // A layer's own records come before its attention: the first wrong records are those of
    // the layer after it, keys and values both.
    const int64_t L = first.firstBadLayer;
    if (L <= 0 || L >= static_cast<int64_t>(first.valueError.size())) return std::nullopt;
    // Values at noise level: a rotation, not an attention output. A small change of the
    // attention output (a sink's share of a long softmax) can leave the next layer's values
    // inside their tolerance while its keys are outside it, so only noise rules it out.
    if (first.valueError[static_cast<size_t>(L)] <= kNoiseFraction * first.valueTol[static_cast<size_t>(L)])
      return std::nullopt;
    m.layer = L - 1;
    m.recordLayer = L;
    m.keyError = first.keyError[static_cast<size_t>(L)];
    m.valueError = first.valueError[static_cast<size_t>(L)];
    m.layerError = std::max(first.keyError[static_cast<size_t>(L - 1)], first.valueError[static_cast<size_t>(L - 1)]);
    m.firstPosition = first.firstBadStreamIndex;
  }
  m.logitError = first.logitsCompared ? first.logitError : 0.0;
  // The steps the hypothesis must reproduce.
  const auto h = hypothesisSteps(trace_, steps);
  if (!h) return std::nullopt;
  m.onset = h->onset;
  m.positionZeroExact = !logitsOnly && m.onset == 0 && first.firstBadStreamIndex > 0;
  if (test(*h, m.layer, /*above=*/true, m)) return m;
  if (m.layer < n - 1 && test(*h, m.layer, /*above=*/false, m)) return m;
  return std::nullopt;
}

FindingDraft droppedFeatureFinding(const StepAnalysis& a, const DroppedFeatureMatch& m,
                                   const DroppedFeatureWords& w, std::map<std::string, double> ev) {
  ev[w.evidenceKey + "_layer"] = static_cast<double>(m.layer);
  ev[w.evidenceKey + "_layers_above"] = m.layersAbove ? 1.0 : 0.0;
  ev[w.evidenceKey + "_layer_record_error"] = m.layerError;
  ev["onset_position"] = static_cast<double>(m.onset);
  ev["hypothesis_error"] = m.hypothesisError;
  ev["hypothesis_logit_error"] = m.hypothesisLogitError;
  ev["tolerance"] = m.tolerance;
  ev["records_compared"] = static_cast<double>(m.records);
  ev["logit_rows_compared"] = static_cast<double>(m.logitRows);
  if (m.recordLayer >= 0) {
    ev["record_layer"] = static_cast<double>(m.recordLayer);
    ev["key_error"] = m.keyError;
    ev["value_error"] = m.valueError;
  }
  const std::string layer = std::to_string(m.layer);
  const bool plural = m.layersAbove && m.recordLayer >= 0;
  const std::string layers = plural ? "layer " + layer + " and every layer after it" : "layer " + layer;
  std::string ex;
  if (m.recordLayer >= 0) {
    ex = "layer " + layer + "'s K/V records are exact (max diff " + numberText(m.layerError) +
         ") but layer " + std::to_string(m.recordLayer) + "'s differ (key error " +
         numberText(m.keyError) + ", value error " + numberText(m.valueError) + ", from position " +
         std::to_string(m.firstPosition) + "): what layer " + layer +
         "'s attention hands on is wrong, not what it was given";
  } else {
    ex = "every K/V record is exact but the logits differ (max diff " + numberText(m.logitError) +
         "): the last layer's attention output is wrong";
  }
  ex += "; an uncached pass whose " + layers + " " + (plural ? w.verbMany : w.verbOne) + " " + w.without +
        " from position " + std::to_string(m.onset) + " on reproduces all " + std::to_string(m.records) +
        " record(s) (max diff " + numberText(m.hypothesisError) + ", tolerance " + numberText(m.tolerance) + ")";
  if (m.logitRows > 0)
    ex += " and all " + std::to_string(m.logitRows) + " logits row(s) (max diff " +
          numberText(m.hypothesisLogitError) + ")";
  ex += ", " + w.how;
  if (m.positionZeroExact && !w.positionZero.empty()) ex += "; position 0 is right, as it must be: " + w.positionZero;
  return FindingDraft(w.id)
      .at(*a.step)
      .layer(m.layer)
      .position(m.firstPosition)
      .confidence(0.95)
      .explanation(ex)
      .evidence(std::move(ev));
}

}  // namespace kvscope::detail
