#include "audit/HypothesisFit.hpp"

#include <algorithm>
#include <cmath>

#include "audit/ColumnDiff.hpp"
#include "audit/NumberText.hpp"

namespace kvscope::detail {

namespace {
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

std::optional<HypothesisSteps> hypothesisSteps(const Trace& trace, const std::vector<const StepAnalysis*>& steps) {
  if (steps.empty()) return std::nullopt;
  const StepAnalysis& first = *steps.front();
  HypothesisSteps h;
  int64_t last = -1;
  for (const StepAnalysis* a : steps) {
    if (a->structural() || a->referenceMissing || a->version != first.version) break;
    h.compared.push_back(a);
    for (const int64_t p : a->streamIndex) {
      last = std::max(last, p);
      if (a == &first && p >= 0 && (h.onset < 0 || p < h.onset)) h.onset = p;
    }
  }
  const TraceRequest* req = trace.findRequest(first.step->request);
  if (!req || h.onset < 0 || last < 0) return std::nullopt;
  h.stream = req->stream();
  if (last >= static_cast<int64_t>(h.stream.size())) return std::nullopt;
  h.stream.resize(static_cast<size_t>(last + 1));
  for (size_t i = 0; i < h.stream.size(); ++i) h.positions.push_back(static_cast<int64_t>(i));
  return h;
}

std::optional<HypothesisFit> fitHypothesis(const Trace& trace, const Tolerance& tol,
                                           const std::vector<const StepAnalysis*>& steps, const ReferenceRun& run) {
  HypothesisFit t;
  for (const StepAnalysis* a : steps) {
    for (size_t l = 0; l < a->step->layers.size() && l < run.keys.size(); ++l) {
      const TraceLayerRecord& rec = a->step->layers[l];
      if (!trace.holdsRows(static_cast<int64_t>(l)) || rec.keys.shape.size() != 3) continue;
      for (size_t j = 0; j < a->streamIndex.size(); ++j) {
        const int64_t p = a->streamIndex[j];
        if (p < 0 || static_cast<int64_t>(j) >= rec.keys.shape[1]) continue;
        const ColumnDiff dk = columnDiff(rec.keys, static_cast<int64_t>(j), run.keys[l], p);
        const ColumnDiff dv = columnDiff(rec.values, static_cast<int64_t>(j), run.values[l], p);
        const double bound = tol.forRecord(static_cast<int64_t>(l), p, std::max(dk.mag, dv.mag));
        if (dk.err > bound || dv.err > bound) return std::nullopt;  // a record the hypothesis does not give
        t.error = std::max({t.error, dk.err, dv.err});
        t.tolerance = std::max(t.tolerance, bound);
        ++t.records;
      }
    }
    if (a->step->logits.numel() > 0 && a->rejected == 0) {
      const int64_t p = a->lastRealStreamIndex();
      const ColumnDiff d = logitsRowDiff(a->step->logits, run.logits, p);
      if (d.err > tol.forLogits(p, d.mag)) return std::nullopt;
      t.logitError = std::max(t.logitError, d.err);
      ++t.logitRows;
    }
  }
  if (t.records + t.logitRows == 0) return std::nullopt;
  return t;
}

std::optional<HypothesisFit> testHypothesis(ReferenceSet& refs, const Trace& trace, const Tolerance& tol,
                                            const HypothesisSteps& h, const PassHypothesis& change) {
  if (h.compared.empty()) return std::nullopt;
  const auto run = refs.hypothesis(h.stream, h.positions, change, h.compared.front()->version);
  if (!run) return std::nullopt;
  return fitHypothesis(trace, tol, h.compared, *run);
}

std::string fitText(const HypothesisFit& fit) {
  std::string s = "all " + std::to_string(fit.records) + " record(s) (max diff " + numberText(fit.error) +
                  ", tolerance " + numberText(fit.tolerance) + ")";
  if (fit.logitRows > 0)
    s += " and " + std::to_string(fit.logitRows) + " logits row(s) (max diff " + numberText(fit.logitError) + ")";
  return s;
}

void addFitEvidence(std::map<std::string, double>& ev, const HypothesisFit& fit) {
  ev["hypothesis_error"] = fit.error;
  ev["hypothesis_logit_error"] = fit.logitError;
  ev["tolerance"] = fit.tolerance;
  ev["records_compared"] = static_cast<double>(fit.records);
  ev["logit_rows_compared"] = static_cast<double>(fit.logitRows);
}

}  // namespace kvscope::detail
