#include "audit/KeyRecordHypothesis.hpp"

#include <algorithm>

#include "audit/ColumnDiff.hpp"
#include "audit/NumberText.hpp"
#include "model/TorchTapSink.hpp"

namespace kvscope::detail {

std::optional<KeyRecordMatch> matchKeyRecords(const std::vector<const StepAnalysis*>& steps,
                                              const RequestReference& own, const Tolerance& tol,
                                              int64_t width, const KeyTransform& transform,
                                              RotatedRecords rotated) {
  if (steps.empty()) return std::nullopt;
  const StepAnalysis& first = *steps.front();
  if (first.firstBadLayer < 0) return std::nullopt;
  const auto l = static_cast<size_t>(first.firstBadLayer);
  const bool inValues = rotated == RotatedRecords::Values;
  // The rotated records' errors and the other records'.
  auto turnedError = [&](const StepAnalysis& a) -> const std::vector<double>& {
    return inValues ? a.valueError : a.keyError;
  };
  auto turnedTol = [&](const StepAnalysis& a) -> const std::vector<double>& { return inValues ? a.valueTol : a.keyTol; };
  auto otherError = [&](const StepAnalysis& a) -> const std::vector<double>& {
    return inValues ? a.keyError : a.valueError;
  };
  auto otherTol = [&](const StepAnalysis& a) -> const std::vector<double>& { return inValues ? a.keyTol : a.valueTol; };
  const std::vector<FloatTensor>& reference = inValues ? own.values : own.keys;
  if (l >= reference.size() || l >= turnedError(first).size()) return std::nullopt;
  auto othersExact = [&](const StepAnalysis& a) {
    return otherError(a).size() > l && otherError(a)[l] <= otherTol(a)[l];
  };
  if (!othersExact(first) || turnedError(first)[l] <= turnedTol(first)[l]) return std::nullopt;
  const FloatTensor& refK = reference[l];
  const int64_t d = width;
  if (refK.shape.size() != 3 || refK.shape[2] != d) return std::nullopt;
  const torch::Tensor ref = fromFloatTensor(refK);  // [h, T, d]

  KeyRecordMatch m;
  m.rotated = rotated;
  m.layer = first.firstBadLayer;
  for (const StepAnalysis* a : steps) {
    if (a->structural() || a->version != first.version || a->referenceMissing) break;
    if (a != &first && !othersExact(*a)) break;  // from here something else is wrong too
    if (l >= a->step->layers.size()) break;
    const FloatTensor& rec = inValues ? a->step->layers[l].values : a->step->layers[l].keys;
    if (rec.shape.size() != 3 || rec.shape[0] != refK.shape[0] || rec.shape[2] != d) break;
    std::vector<int64_t> cols, pos;
    for (size_t j = 0; j < a->streamIndex.size(); ++j) {
      const int64_t p = a->streamIndex[j];
      if (p < 0 || p >= refK.shape[1] || static_cast<int64_t>(j) >= rec.shape[1]) continue;
      cols.push_back(static_cast<int64_t>(j));
      pos.push_back(p);
    }
    if (cols.empty()) continue;
    const auto n = static_cast<int64_t>(cols.size());
    const auto p = torch::tensor(pos, torch::kLong);
    const auto refCols = ref.index_select(1, p).unsqueeze(0);  // [1, h, n, d]
    const FloatTensor hyp = toFloatTensor(transform(refCols, p).to(torch::kFloat).squeeze(0).contiguous());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = cols[static_cast<size_t>(i)], sp = pos[static_cast<size_t>(i)];
      const ColumnDiff mine = columnDiff(rec, c, refK, sp);
      const ColumnDiff alt = columnDiff(rec, c, hyp, i);
      const double t = tol.forRecord(static_cast<int64_t>(l), sp, mine.mag);
      m.hypothesisError = std::max(m.hypothesisError, alt.err);
      m.tolerance = std::max(m.tolerance, t);
      m.ownError = std::max(m.ownError, mine.err);
      ++m.records;
      if (alt.err > t) return std::nullopt;  // one record the hypothesis does not give
      if (mine.err <= t) {
        if (sp == 0) m.positionZeroExact = true;
        continue;
      }
      if (m.diverged++ == 0) {
        m.firstPosition = sp;
        m.firstKeyError = mine.err;
      }
      m.lastPosition = sp;
      m.lastKeyError = mine.err;
    }
    m.valueError = std::max(m.valueError, otherError(*a)[l]);
  }
  if (m.diverged == 0) return std::nullopt;
  return m;
}

std::pair<std::string, std::string> recordNames(const KeyRecordMatch& m) {
  if (m.rotated == RotatedRecords::Values) return {"roped key parts (k_pe)", "latent rows"};
  return {"keys", "values"};
}

void addKeyRecordEvidence(std::map<std::string, double>& ev, const KeyRecordMatch& m,
                          const std::string& hypothesisKey) {
  ev["key_error"] = m.firstKeyError;
  ev["value_error"] = m.valueError;
  ev[hypothesisKey] = m.hypothesisError;
  ev["tolerance"] = m.tolerance;
  ev["own_reference_error"] = m.ownError;
  ev["records_compared"] = static_cast<double>(m.records);
  ev["records_diverged"] = static_cast<double>(m.diverged);
  ev["first_position"] = static_cast<double>(m.firstPosition);
  ev["last_position"] = static_cast<double>(m.lastPosition);
  ev["key_error_last_position"] = m.lastKeyError;
}

FindingDraft keyRecordFinding(const char* id, const StepAnalysis& a, const KeyRecordMatch& m,
                              std::string ex, const std::string& positionZero,
                              std::map<std::string, double> ev) {
  if (m.positionZeroExact) ex += "; the key at position 0 is right, as it must be: " + positionZero;
  if (a.logitsCompared) ex += "; logits moved by " + numberText(a.logitError);
  return FindingDraft(id)
      .at(*a.step)
      .layer(a.firstBadLayer)
      .position(a.firstBadStreamIndex)
      .confidence(0.95)
      .explanation(ex)
      .evidence(std::move(ev));
}

}  // namespace kvscope::detail
