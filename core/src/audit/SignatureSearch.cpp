#include "audit/SignatureSearch.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "audit/ColumnDiff.hpp"
#include "kvscope/FailureMatrix.hpp"

namespace kvscope::detail {

namespace {
ColumnDiff recordDiff(const TraceLayerRecord& rec, int64_t c, const FloatTensor& k,
                      const FloatTensor& v, int64_t p) {
  return kvColumnDiff(rec.keys, rec.values, c, k, v, p);
}
}  // namespace

std::optional<SignatureMatch> SignatureSearch::explain(int64_t request, const StepAnalysis& a,
                                                       const RequestReference& own) {
  if (a.firstBadLayer < 0) return std::nullopt;
  const auto l = static_cast<size_t>(a.firstBadLayer);
  const TraceLayerRecord& rec = a.step->layers[l];
  const int64_t c = a.firstBadColumn, p = a.firstBadStreamIndex;
  const ColumnDiff self = recordDiff(rec, c, own.keys[l], own.values[l], p);
  const auto layer = static_cast<int64_t>(l);
  // 1. Another layer at the same position (wrong-layer cache source).
  for (size_t j = 0; j < own.keys.size(); ++j) {
    if (j == l) continue;
    const ColumnDiff dj = recordDiff(rec, c, own.keys[j], own.values[j], p);
    if (dj.err <= tol_.forRecord(std::max(layer, static_cast<int64_t>(j)), p, dj.mag) &&
        dj.err < self.err)
      return SignatureMatch{
          finding::WrongLayer, static_cast<int64_t>(j), p, request, dj.err, self.err};
  }
  // 2. The same layer of another request (cross-request or batch-row mixing).
  for (const auto& [other, ref] : others_) {
    if (other == request || !ref || l >= ref->keys.size()) continue;
    const int64_t T = ref->keys[l].shape[1];
    for (int64_t q = 0; q < T; ++q) {
      const ColumnDiff dq = recordDiff(rec, c, ref->keys[l], ref->values[l], q);
      if (dq.err <= tol_.forRecord(layer, q, dq.mag) && dq.err < self.err)
        return SignatureMatch{
            finding::CrossRequest, static_cast<int64_t>(l), q, other, dq.err, self.err};
    }
  }
  // 3. Layer 0 keys computed at another position (RoPE / learned position rows).
  if (l == 0 && refs_.hasModel()) {
    const int64_t token = a.step->fedIds[static_cast<size_t>(c)];
    const auto probeCount = std::max<int64_t>(2 * static_cast<int64_t>(own.ids.size()) + 64, 512);
    FloatTensor probe = refs_.probeLayer0(token, probeCount, a.version);  // [Q, h, d]
    if (probe.shape.size() == 3) {
      const int64_t Q = probe.shape[0], h = probe.shape[1], d = probe.shape[2], tr = rec.keys.shape[1];
      int64_t best = -1;
      double bestErr = std::numeric_limits<double>::infinity(), bestMag = 0;
      for (int64_t q = 0; q < Q; ++q) {
        double err = 0, mag = 0;
        for (int64_t hh = 0; hh < h; ++hh)
          for (int64_t j = 0; j < d; ++j) {
            const double x = probe.data[static_cast<size_t>((q * h + hh) * d + j)];
            err = std::max(err, std::fabs(rec.keys.data[static_cast<size_t>((hh * tr + c) * d + j)] - x));
            mag = std::max(mag, std::fabs(x));
          }
        if (err < bestErr) {
          bestErr = err;
          best = q;
          bestMag = mag;
        }
      }
      // Positions count real entries: padding columns hold no position.
      if (best >= 0 && bestErr <= tol_.forRecord(0, best, bestMag) &&
          best != a.cacheRealBefore + a.realOrdinal(c))
        return SignatureMatch{finding::Position, 0, best, request, bestErr, self.err};
    }
  }
  return std::nullopt;
}

}  // namespace kvscope::detail
