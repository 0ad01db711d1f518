#include "audit/SignatureSearch.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvscope::detail {

namespace {
// max |rec[:, c, :] - ref[:, p, :]| over keys and values; and the reference magnitude.
struct Diff {
  double err = std::numeric_limits<double>::infinity();
  double mag = 0.0;
};
Diff columnDiff(const TraceLayerRecord& rec, int64_t c, const FloatTensor& k, const FloatTensor& v, int64_t p) {
  Diff out;
  if (k.shape.size() != 3 || p < 0 || p >= k.shape[1] || rec.keys.shape.size() != 3 || k.shape[0] != rec.keys.shape[0] ||
      k.shape[2] != rec.keys.shape[2])
    return out;
  const int64_t h = k.shape[0], t = k.shape[1], d = k.shape[2], tr = rec.keys.shape[1];
  double err = 0, mag = 0;
  for (int64_t hh = 0; hh < h; ++hh)
    for (int64_t j = 0; j < d; ++j) {
      const double rk = k.data[static_cast<size_t>((hh * t + p) * d + j)];
      const double rv = v.data[static_cast<size_t>((hh * t + p) * d + j)];
      err = std::max({err, std::fabs(rec.keys.data[static_cast<size_t>((hh * tr + c) * d + j)] - rk),
                      std::fabs(rec.values.data[static_cast<size_t>((hh * tr + c) * d + j)] - rv)});
      mag = std::max({mag, std::fabs(rk), std::fabs(rv)});
    }
  out.err = err;
  out.mag = mag;
  return out;
}
}  // namespace

std::optional<SignatureMatch> SignatureSearch::explain(int64_t request, const StepAnalysis& a,
                                                       const RequestReference& own) {
  if (a.firstBadLayer < 0) return std::nullopt;
  const auto l = static_cast<size_t>(a.firstBadLayer);
  const TraceLayerRecord& rec = a.step->layers[l];
  const int64_t c = a.firstBadColumn, p = a.firstBadStreamIndex;
  const Diff self = columnDiff(rec, c, own.keys[l], own.values[l], p);
  // 1. Another layer at the same position (wrong-layer cache source).
  for (size_t j = 0; j < own.keys.size(); ++j) {
    if (j == l) continue;
    Diff dj = columnDiff(rec, c, own.keys[j], own.values[j], p);
    if (dj.err <= tol_.forMagnitude(dj.mag))
      return SignatureMatch{"wrong_layer", static_cast<int64_t>(j), p, request, dj.err, self.err};
  }
  // 2. The same layer of another request (cross-request or batch-row mixing).
  for (const auto& [other, ref] : others_) {
    if (other == request || !ref || l >= ref->keys.size()) continue;
    const int64_t T = ref->keys[l].shape[1];
    for (int64_t q = 0; q < T; ++q) {
      Diff dq = columnDiff(rec, c, ref->keys[l], ref->values[l], q);
      if (dq.err <= tol_.forMagnitude(dq.mag))
        return SignatureMatch{"cross_request", static_cast<int64_t>(l), q, other, dq.err, self.err};
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
      if (best >= 0 && bestErr <= tol_.forMagnitude(bestMag) && best != a.cacheRealBefore + c)
        return SignatureMatch{"position", 0, best, request, bestErr, self.err};
    }
  }
  return std::nullopt;
}

}  // namespace kvscope::detail
