// Computes StepSnapshots from an immutable audit output. Runs on the engine thread; keeps
// a small cache of per-layer differences so scrubbing heads and layers at one step does
// not redo the whole-cache comparison.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "kvscope/AuditJob.hpp"
#include "ui/Selection.hpp"
#include "ui/StepSnapshot.hpp"

namespace kvscope::ui {

class StepSnapshotBuilder {
 public:
  std::shared_ptr<const StepSnapshot> build(const AuditJobOutput& output, uint64_t outputSerial,
                                            const Selection& selection);

  /// The reference logits row index for (request, step): real tokens consumed up to and
  /// including the step, minus one; -1 when the step is unknown.
  static int64_t referenceRow(const Trace& trace, int64_t request, int64_t step);
  /// The kv head whose records appended at (request, step, layer) differ most from the
  /// reference (cheap: only that step's records); -1 when they cannot be compared.
  static int64_t worstHead(const AuditResult& result, int64_t request, int64_t step, int64_t layer,
                           KvKind kind);
  /// The kv head whose whole cache after (request, step) at `layer` differs most from the
  /// reference (earlier rows included, e.g. rows another request overwrote, rebuilt by
  /// CacheRowReplay when the checksum says so); -1 when nothing compares or differs.
  static int64_t worstCacheHead(const AuditResult& result, int64_t request, int64_t step,
                                int64_t layer, KvKind kind);

 private:
  /// The cached side after (request, step) at `layer`: the engine's row rebuilt by
  /// CacheRowReplay when the checksum says it was overwritten (`replayed` true), else the
  /// request's own records (AuditResult::cachedKv).
  static FloatTensor cachedSide(const AuditResult& result, int64_t request, int64_t step,
                                int64_t layer, KvKind kind, bool* rewritten, bool* replayed);
  std::vector<double> layerDiffs(const AuditResult& result, uint64_t serial, int64_t request,
                                 int64_t step, KvKind kind);
  /// layerMaxDiff(step) from layerMaxDiff(previous step) and the records `step` appended,
  /// when the cache is append-only (no snapshots, shapes agree); false when not applicable.
  static bool incrementalDiffs(const AuditResult& result, int64_t request, int64_t step,
                               KvKind kind, const std::vector<double>& previous,
                               std::vector<double>* out);

  std::mutex mutex_;  // build() is meant for one thread; the lock keeps misuse safe
  uint64_t cacheSerial_ = 0;
  bool appendOnly_ = false;  // the cached trace has no snapshots: caches only grow
  std::map<std::tuple<int64_t, int64_t, int>, std::vector<double>> layerCache_;
};

}  // namespace kvscope::ui
