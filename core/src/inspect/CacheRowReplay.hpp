// What an engine's cache row really held, when its own records say otherwise. Engines that
// record a checksum of each layer's cache row after every step (the built-in one does)
// let the inspector notice a row that was overwritten after its records were appended —
// another request given the same row, a batch row written twice — which the appended
// records alone can never show. Replaying every step's records that went into the same
// row (slot), in recording order, at the cache indices they were written to, rebuilds the
// row; the result is used only when it reproduces the recorded checksum, so it is never a
// guess. Plain functions of the immutable trace (the Inspector calls them).
#pragma once

#include <cstdint>

#include "kvscope/AuditResult.hpp"

namespace kvscope::detail {

class CacheRowReplay {
 public:
  /// True when (request, step, layer) records a checksum of its cache row (kind) that the
  /// request's own appended records, pads included, do not reproduce.
  static bool rowRewritten(const Trace& trace, int64_t request, int64_t step, int64_t layer,
                           KvKind kind);
  /// The row [h_kv, t, d] after (request, step) at `layer`, rebuilt from the records of
  /// every request written to the same slot up to that step, pads removed like
  /// AuditResult::cachedKv (TraceStep::realColumns); empty unless the rebuilt row reproduces the recorded checksum.
  static FloatTensor replay(const Trace& trace, int64_t request, int64_t step, int64_t layer,
                            KvKind kind);
};

}  // namespace kvscope::detail
