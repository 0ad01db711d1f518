#include "audit/rows/kv_quantization/QuantizationEvidence.hpp"

#include <algorithm>
#include <cmath>

#include "audit/NumberText.hpp"

namespace kvscope::detail {

namespace {
struct RowStats {
  double err = 0, refMax = 0, recMax = 0;
};

// Row (head hh, column c) of a record [h, s, d] against row (hh, p) of a reference [h, T, d].
RowStats row(const FloatTensor& rec, int64_t c, const FloatTensor& ref, int64_t p, int64_t hh) {
  RowStats s;
  const int64_t t = rec.shape[1], d = rec.shape[2], T = ref.shape[1];
  for (int64_t j = 0; j < d; ++j) {
    const double x = rec.data[static_cast<size_t>((hh * t + c) * d + j)];
    const double y = ref.data[static_cast<size_t>((hh * T + p) * d + j)];
    s.err = std::max(s.err, std::fabs(x - y));
    s.refMax = std::max(s.refMax, std::fabs(y));
    s.recMax = std::max(s.recMax, std::fabs(x));
  }
  return s;
}

bool fits(const FloatTensor& rec, const FloatTensor& ref, int64_t c, int64_t p) {
  return rec.shape.size() == 3 && ref.shape.size() == 3 && rec.shape[0] == ref.shape[0] &&
         rec.shape[2] == ref.shape[2] && c >= 0 && c < rec.shape[1] && p >= 0 && p < ref.shape[1];
}
}  // namespace

double rowScaleGap(const FloatTensor& keys, const FloatTensor& values, int64_t c,
                   const FloatTensor& refKeys, const FloatTensor& refValues, int64_t p) {
  double gap = 0;
  for (const auto& [r, ref] : {std::pair{&keys, &refKeys}, {&values, &refValues}}) {
    if (!fits(*r, *ref, c, p)) return 0.0;
    for (int64_t hh = 0; hh < r->shape[0]; ++hh) {
      const RowStats s = row(*r, c, *ref, p, hh);
      gap = std::max(gap, std::fabs(s.recMax - s.refMax));
    }
  }
  return gap;
}

std::optional<QuantizationEvidence> measureQuantization(const StepAnalysis& a,
                                                        const RequestReference& own,
                                                        const Tolerance& tol) {
  if (a.firstBadLayer < 0 || a.firstBadColumn < 0) return std::nullopt;
  const auto l = static_cast<size_t>(a.firstBadLayer);
  if (l >= a.step->layers.size() || l >= own.keys.size()) return std::nullopt;
  const TraceLayerRecord& rec = a.step->layers[l];
  const int64_t c = a.firstBadColumn, p = a.firstBadStreamIndex;
  QuantizationEvidence q;
  q.layer = a.firstBadLayer;
  q.position = p;
  double mag = 0;
  for (const auto& [r, ref] : {std::pair{&rec.keys, &own.keys[l]}, {&rec.values, &own.values[l]}}) {
    if (!fits(*r, *ref, c, p)) return std::nullopt;
    for (int64_t hh = 0; hh < r->shape[0]; ++hh) {
      const RowStats s = row(*r, c, *ref, p, hh);
      mag = std::max(mag, s.refMax);
      if (s.err > q.error) {
        q.error = s.err;
        q.ratio = s.refMax > 0 ? s.recMax / s.refMax : 0.0;
      }
    }
  }
  q.step = tol.cache().step(q.layer, mag);
  return q;
}

FindingDraft quantizationFinding(const StepAnalysis& a, const QuantizationEvidence& q,
                                 const Tolerance& tol, std::map<std::string, double> ev) {
  const KvQuantization& c = tol.cache();
  ev["error_in_steps"] = q.errorSteps();
  ev["quantization_step"] = q.step;
  ev["row_magnitude_ratio"] = q.ratio;
  // A correct quantiser keeps a row's absmax exact (per token) or within half a step: a row
  // whose magnitude is off by more than its rounding was dequantised with another scale.
  const bool perRow = c.scale == "per_token_head";
  const bool scaled =
      std::fabs(q.ratio - 1.0) > (perRow ? 0.02 : 2.0 * c.relativeHalfStep() + 0.02);
  const std::string cause =
      scaled ? std::string("its largest element") +
                   (perRow ? ", which the row's scale stores exactly," : "") + " is " +
                   numberText(q.ratio, 3) +
                   " x the projection's: the row was dequantised with a wrong scale"
             : "its magnitude is right but its elements do not round to the declared " + c.dtype +
                   " codes: the element type or the scale granularity differs from the one "
                   "declared";
  return FindingDraft(finding::KvQuantization)
      .at(*a.step)
      .layer(q.layer)
      .position(q.position)
      .confidence(scaled ? 0.9 : 0.6)
      .explanation(
          "the trace declares a quantised cache (" + c.describe() + "): " +
          (tol.referenceRounded()
               ? "a correct record equals the reference's rounded projection, up to one "
                 "quantisation step where an element near a rounding edge rounds the "
                 "other way, "
               : "a correct record sits within half a quantisation step of its "
                 "projection, ") +
          "but layer " + std::to_string(q.layer) + "'s record at stream position " +
          std::to_string(q.position) + " is off by " + numberText(q.error) + " (" +
          numberText(q.errorSteps(), 3) + " steps of " + numberText(q.step) + "); " + cause +
          (q.layer > 0 ? "; layers below " + std::to_string(q.layer) + " are within their budget"
                       : ""))
      .evidence(std::move(ev));
}

std::string quantizationBudgetCheck(const Tolerance& tol,
                                    const std::map<int64_t, std::vector<StepAnalysis>>& analyses) {
  double worst = 0;  // error / tolerance at layer 0, where the budget is the rounding alone
  int records = 0, beyond = 0;
  for (const auto& [r, steps] : analyses)
    for (const auto& a : steps) {
      if (a.referenceMissing || a.keyError.empty() || a.keyTol.empty()) continue;
      if (a.firstBadLayer == 0) {
        ++beyond;
        continue;
      }
      ++records;
      worst = std::max({worst, a.keyTol[0] > 0 ? a.keyError[0] / a.keyTol[0] : 0.0,
                        a.valueTol[0] > 0 ? a.valueError[0] / a.valueTol[0] : 0.0});
    }
  if (beyond > 0)
    return "FAIL: layer-0 records of the quantised cache (" + tol.cache().describe() + ") beyond " +
           "half a quantisation step at " + std::to_string(beyond) + " steps";
  if (records == 0)
    return "not checked: the quantised cache's budget (" + tol.cache().describe() +
           "): no layer-0 record was compared";
  return "ok: layer-0 records of the quantised cache (" + tol.cache().describe() +
         ") within half a quantisation step: worst " + numberText(worst * 100, 3) +
         "% of the budget over " + std::to_string(records) + " steps";
}

}  // namespace kvscope::detail
