// Per-layer whole-cache differences of one request at one step, as the inspector's layer
// overview shows them: max |cached - reference| per layer over every position the request
// holds, with rows that the engine rewrote in place (CacheRowReplay) compared as the engine
// held them. Plain functions of the immutable audit result.
#pragma once

#include <cstdint>
#include <vector>

#include "kvscope/AuditResult.hpp"

namespace kvscope::detail {

class LayerDiffs {
 public:
  /// From scratch: O(L * h_kv * t * d).
  static std::vector<double> compute(const AuditResult& result, int64_t request, int64_t step,
                                     KvKind kind);
  /// The maxima of `step` from those of the request's previous step and the records `step`
  /// appended, O(L * h_kv * s * d); false when that shortcut does not apply (the cache did
  /// not grow the way the reference did, or shapes already differ).
  static bool extend(const AuditResult& result, int64_t request, int64_t step, KvKind kind,
                     const std::vector<double>& previous, std::vector<double>* out);
  /// Replaces the entries of layers whose cache row was rewritten in place by the
  /// difference of the row the engine really held.
  static void applyRewrittenRows(const AuditResult& result, int64_t request, int64_t step,
                                 KvKind kind, std::vector<double>* diffs);
};

}  // namespace kvscope::detail
