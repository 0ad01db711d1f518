#include "audit/DroppedFeatureHypothesis.hpp"

#include <algorithm>
#include <cmath>

#include "audit/ColumnDiff.hpp"
#include "audit/NumberText.hpp"

namespace kvscope::detail {

namespace {
// A record error below this fraction of its tolerance is float noise.
constexpr double kNoiseFraction = 0.05;

// max |row - ref[p]| and max |ref[p]| for a logits row [V] against ref [T, V].
ColumnDiff logitsRowDiff(const FloatTensor& row, const FloatTensor& ref, int64_t p) {
  ColumnDiff d;
  if (ref.shape.size() != 2 || p < 0 || p >= ref.shape[0] || row.numel() != ref.shape[1]) return d;
  const int64_t V = ref.shape[1];
  d.err = 0;
  for (int64_t v = 0; v < V; ++v) {
    const float want = ref.data[static_cast<size_t>(p * V + v)];
    const float got = row.data[static_cast<size_t>(v)];
    const double diff = std::isnan(got) != std::isnan(want) ? INFINITY : std::fabs(got - want);
    d.err = std::max(d.err, diff);
    d.mag = std::max(d.mag, static_cast<double>(std::fabs(want)));
  }
  return d;
}
}  // namespace

bool DroppedFeatureHypothesis::test(const std::vector<const StepAnalysis*>& steps,
                                  const std::vector<int64_t>& stream, int64_t from, bool above,
                                  DroppedFeatureMatch& m) const {
  const ModelConfig& config = *refs_.modelConfig();
  PassHypothesis change;
  for (int64_t l = from; l <= (above ? config.numLayers - 1 : from); ++l) change.droppedFrom[feature_][l] = m.onset;
  std::vector<int64_t> positions(stream.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int64_t>(i);
  const auto run = refs_.hypothesis(stream, positions, change, steps.front()->version);
  if (!run) return false;
  DroppedFeatureMatch t = m;
  t.layersAbove = above;
  for (const StepAnalysis* a : steps) {
    for (size_t l = 0; l < a->step->layers.size() && l < run->keys.size(); ++l) {
      const TraceLayerRecord& rec = a->step->layers[l];
      if (!trace_.hasLayer(static_cast<int64_t>(l)) || rec.keys.shape.size() != 3) continue;
      for (size_t j = 0; j < a->streamIndex.size(); ++j) {
        const int64_t p = a->streamIndex[j];
        if (p < 0 || static_cast<int64_t>(j) >= rec.keys.shape[1]) continue;
        const ColumnDiff dk = columnDiff(rec.keys, static_cast<int64_t>(j), run->keys[l], p);
        const ColumnDiff dv = columnDiff(rec.values, static_cast<int64_t>(j), run->values[l], p);
        const double tol = tol_.forRecord(static_cast<int64_t>(l), p, std::max(dk.mag, dv.mag));
        if (dk.err > tol || dv.err > tol) return false;  // a record the hypothesis does not give
        t.hypothesisError = std::max({t.hypothesisError, dk.err, dv.err});
        t.tolerance = std::max(t.tolerance, tol);
        ++t.records;
      }
    }
    if (a->step->logits.numel() > 0 && a->rejected == 0) {
      const int64_t p = a->lastRealStreamIndex();
      const ColumnDiff d = logitsRowDiff(a->step->logits, run->logits, p);
      if (d.err > tol_.forLogits(p, d.mag)) return false;
      t.hypothesisLogitError = std::max(t.hypothesisLogitError, d.err);
      ++t.logitRows;
    }
  }
  if (t.records + t.logitRows == 0) return false;
  m = t;
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
  // The steps the hypothesis must reproduce: the request's, with the same weights, until
  // something structural happens.
  std::vector<const StepAnalysis*> compared;
  int64_t last = -1;
  m.onset = -1;
  for (const StepAnalysis* a : steps) {
    if (a->structural() || a->referenceMissing || a->version != first.version) break;
    compared.push_back(a);
    for (const int64_t p : a->streamIndex) {
      last = std::max(last, p);
      if (a == &first && p >= 0 && (m.onset < 0 || p < m.onset)) m.onset = p;
    }
  }
  const TraceRequest* req = trace_.findRequest(first.step->request);
  if (!req || m.onset < 0 || last < 0) return std::nullopt;
  std::vector<int64_t> stream = req->stream();
  if (last >= static_cast<int64_t>(stream.size())) return std::nullopt;
  stream.resize(static_cast<size_t>(last + 1));
  m.positionZeroExact = !logitsOnly && m.onset == 0 && first.firstBadStreamIndex > 0;
  if (test(compared, stream, m.layer, /*above=*/true, m)) return m;
  if (m.layer < n - 1 && test(compared, stream, m.layer, /*above=*/false, m)) return m;
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
