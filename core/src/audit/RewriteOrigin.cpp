#include "audit/RewriteOrigin.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "audit/ColumnDiff.hpp"
#include "kvscope/FailureMatrix.hpp"

namespace kvscope::detail {

namespace {
constexpr double kNoMatch = std::numeric_limits<double>::infinity();
}

double RewriteOrigin::matchAt(const StepAnalysis& a, const RequestReference& ref, size_t refLayer,
                              int64_t& rows) const {
  const auto l = static_cast<size_t>(a.rewrittenLayer);
  const TraceLayerRecord& rec = a.step->layers[l];
  if (refLayer >= ref.keys.size()) return kNoMatch;
  double worst = 0;
  rows = 0;
  for (size_t i = 0; i < a.rewrittenColumns.size(); ++i) {
    const int64_t p = a.rewrittenStream[i];
    if (p < 0) continue;
    const ColumnDiff d = kvColumnDiff(rec.snapshotKeys, rec.snapshotValues, a.rewrittenColumns[i],
                                      ref.keys[refLayer], ref.values[refLayer], p);
    if (!(d.err <= tol_.forRecord(static_cast<int64_t>(std::max(l, refLayer)), p, d.mag)))
      return kNoMatch;
    worst = std::max(worst, d.err);
    ++rows;
  }
  return rows > 0 ? worst : kNoMatch;
}

std::optional<RewriteMatch> RewriteOrigin::explain(int64_t request, const StepAnalysis& a,
                                                   const RequestReference& own) const {
  if (a.rewrittenLayer < 0 || a.rewrittenColumns.empty()) return std::nullopt;
  const auto l = static_cast<size_t>(a.rewrittenLayer);
  if (l >= a.step->layers.size() || a.step->layers[l].snapshotKeys.empty()) return std::nullopt;
  int64_t rows = 0;
  // The rows' own reference: the ownError reported beside the match.
  double ownError = 0;
  {
    const TraceLayerRecord& rec = a.step->layers[l];
    for (size_t i = 0; i < a.rewrittenColumns.size(); ++i)
      if (a.rewrittenStream[i] >= 0 && l < own.keys.size())
        ownError = std::max(
            ownError, kvColumnDiff(rec.snapshotKeys, rec.snapshotValues, a.rewrittenColumns[i],
                                   own.keys[l], own.values[l], a.rewrittenStream[i])
                          .err);
  }
  // 1. Another layer of this request at the same positions: the cache of layer l was
  //    replaced by layer j's (old rows included).
  std::optional<RewriteMatch> best;
  for (size_t j = 0; j < own.keys.size(); ++j) {
    if (j == l) continue;
    const double e = matchAt(a, own, j, rows);
    if (e < ownError && (!best || e < best->error))
      best = RewriteMatch{finding::WrongLayer, static_cast<int64_t>(j), -1, rows, e, ownError};
  }
  if (best) return best;
  // 2. Another request's reference at the same positions, any layer (slot reuse writes
  //    the other request's whole cache; a wrong layer there shows as another layer).
  for (const auto& [other, ref] : references_) {
    if (other == request || !ref) continue;
    for (size_t j = 0; j < ref->keys.size(); ++j) {
      const double e = matchAt(a, *ref, j, rows);
      if (e < ownError && (!best || e < best->error))
        best =
            RewriteMatch{finding::CrossRequest, static_cast<int64_t>(j), other, rows, e, ownError};
    }
    if (best) return best;
  }
  return std::nullopt;
}

}  // namespace kvscope::detail
