#include "audit/rows/reference/FirstRecords.hpp"

#include <algorithm>
#include <limits>

#include "audit/ColumnDiff.hpp"
#include "audit/NumberText.hpp"

namespace kvscope::detail {

namespace {

// Whether `rec`'s column `c` (layer 0, stream position 0) equals some reference's row at
// position 0 in any layer: then another layer's or request's record was written here.
bool equalsAReferenceRow(const TraceLayerRecord& rec, int64_t c,
                         const std::vector<const RequestReference*>& all, const Tolerance& tol) {
  for (const RequestReference* ref : all)
    for (size_t l = 0; l < ref->keys.size() && l < ref->values.size(); ++l) {
      if (ref->keys[l].shape.size() != 3 || ref->keys[l].shape[1] < 1) continue;
      const ColumnDiff d = kvColumnDiff(rec.keys, rec.values, c, ref->keys[l], ref->values[l], 0);
      if (d.err <= tol.forRecord(static_cast<int64_t>(l), 0, d.mag)) return true;
    }
  return false;
}

}  // namespace

std::optional<FirstRecordsVerdict> firstRecordsNotReproduced(const Trace& trace,
                                                             const RequestAnalyses& analyses,
                                                             ReferenceSet& refs,
                                                             const Tolerance& tol,
                                                             bool referenceTrace) {
  if (!trace.holdsRows(0)) return std::nullopt;
  constexpr double inf = std::numeric_limits<double>::infinity();
  struct Checked {
    const StepAnalysis* first;
    const TraceRequest* request;
    const RequestReference* ref;
    int64_t zeroColumn;
  };
  std::vector<Checked> checked;
  std::vector<const RequestReference*> all;
  // The smallest error/tolerance ratio over every checked record and logits row: "everywhere".
  double keyRatio = inf, valueRatio = inf, logitRatio = inf;
  double keyError = inf, valueError = inf, logitError = 0, logitTol = 0;
  for (const auto& [r, steps] : analyses) {
    if (steps.empty()) continue;
    const StepAnalysis& a = steps.front();
    if (a.structural() || a.lengthMismatchLayer >= 0) return std::nullopt;  // a cache bug shows
    const TraceRequest* req = trace.findRequest(r);
    if (!req || a.referenceMissing || a.reused > 0 || a.cacheRealBefore != 0 ||
        a.step->layers.empty() || a.step->layers[0].keys.shape.size() != 3)
      continue;  // not checkable here
    const StepAnalysis* withLogits = nullptr;
    for (const auto& s : steps) {
      if (s.structural()) return std::nullopt;
      if (s.logitsCompared) {
        withLogits = &s;
        break;
      }
    }
    if (!withLogits || withLogits->version != a.version) continue;
    const RequestReference* ref = refs.get(r, a.version, req->stream());
    if (!ref || ref->keys.empty() || ref->keys[0].shape.size() != 3) continue;
    const TraceLayerRecord& rec = a.step->layers[0];
    int64_t zero = -1;
    for (size_t j = 0; j < a.streamIndex.size(); ++j) {
      const int64_t p = a.streamIndex[j], c = static_cast<int64_t>(j);
      if (p < 0 || p >= ref->keys[0].shape[1] || c >= rec.keys.shape[1]) continue;
      const ColumnDiff k = columnDiff(rec.keys, c, ref->keys[0], p);
      const ColumnDiff v = columnDiff(rec.values, c, ref->values[0], p);
      keyRatio = std::min(keyRatio, k.err / tol.forRecord(0, p, k.mag));
      valueRatio = std::min(valueRatio, v.err / tol.forRecord(0, p, v.mag));
      keyError = std::min(keyError, k.err);
      valueError = std::min(valueError, v.err);
      if (p == 0) zero = c;
    }
    if (zero < 0) continue;  // position 0 is not among the records
    if (withLogits->logitTol <= 0) continue;
    const double ratio = withLogits->logitError / withLogits->logitTol;
    if (ratio < logitRatio) {
      logitRatio = ratio;
      logitError = withLogits->logitError;
      logitTol = withLogits->logitTol;
    }
    checked.push_back({&a, req, ref, zero});
    all.push_back(ref);
  }
  if (checked.empty()) return std::nullopt;
  if (!(keyRatio > kFirstRecordsFar && valueRatio > kFirstRecordsFar &&
        logitRatio > kFirstRecordsFar))
    return std::nullopt;
  for (const Checked& c : checked)
    if (equalsAReferenceRow(c.first->step->layers[0], c.zeroColumn, all, tol)) return std::nullopt;

  const Checked& first = *std::min_element(checked.begin(), checked.end(), [](const Checked& x, const Checked& y) {
    return x.first->step->tick < y.first->step->tick;
  });
  const std::string who = checked.size() == 1 ? "request " + std::to_string(first.request->id) + "'s"
                                              : "every request's (" + std::to_string(checked.size()) + ")";
  const std::string verdict = referenceTrace
                                  ? "the reference trace was not recorded with the weights that produced this trace"
                                  : "these weights did not produce this trace";
  const std::string why =
      "the reference does not reproduce the run from its first record on: " + who +
      " layer-0 prefill keys and values differ at every position, position 0 included (at least " +
      numberText(std::min(keyRatio, valueRatio), 3) + "x their tolerance; no cache bug changes "
      "layer 0's record of the first token), and the first logits row by " +
      numberText(logitError, 3) + " vs tolerance " + numberText(logitTol, 3) + ": " + verdict;
  FirstRecordsVerdict out{
      FindingDraft(finding::Reference)
          .at(*first.first->step)
          .layer(0)
          .position(0)
          .confidence(0.95)
          .explanation(why)
          .evidence({{"key_error_min", keyError},
                     {"value_error_min", valueError},
                     {"key_tolerance_ratio_min", keyRatio},
                     {"value_tolerance_ratio_min", valueRatio},
                     {"logit_error", logitError},
                     {"logit_tolerance", logitTol},
                     {"requests_checked", static_cast<double>(checked.size())}}),
      "FAIL: " + why,
      referenceTrace ? "the reference trace does not fit the audited one: " + verdict
                     : "the reference cannot be trusted: " + verdict};
  return out;
}

}  // namespace kvscope::detail
