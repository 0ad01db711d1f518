// Walks one request's recorded steps in order, aligning what was fed with the request's
// own stream (prompt + generated), rebuilding its cache from the appended records, and
// measuring every record and logits row against the reference of the step's weights.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "audit/StepAnalysis.hpp"
#include "audit/RebuiltCacheRow.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/AuditResult.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

class RequestWalk {
 public:
  using ReferenceLookup = std::function<const RequestReference*(uint64_t version)>;
  using MissingReason = std::function<std::string()>;
  RequestWalk(const Trace& trace, const TraceRequest& request, const Tolerance& tolerance,
              ReferenceLookup reference, MissingReason whyMissing = {});
  std::vector<StepAnalysis> run();

 private:
  void alignStream(StepAnalysis& a, const std::vector<int64_t>& real, int64_t& streamPos);
  void checkPositions(StepAnalysis& a, const std::vector<int64_t>& real);
  void checkCache(StepAnalysis& a, size_t layer, const TraceLayerRecord& rec);
  /// A ring layer (layer_kinds ring_slots): its slot map against the positions fed, and its
  /// checksums against the records the map places, slot by slot.
  void checkRing(StepAnalysis& a, size_t layer, const TraceLayerRecord& rec, int64_t held);
  /// Whether the ring's recorded checksums match the rebuilt records at the positions its
  /// map names (nullopt: not verifiable, e.g. a slot holds padding).
  std::optional<bool> ringChecksumsMatch(size_t layer, const TraceLayerRecord& rec,
                                         int64_t held) const;
  void compareRecords(StepAnalysis& a, size_t layer, const TraceLayerRecord& rec,
                      const RequestReference& ref);
  void compareLogits(StepAnalysis& a, const RequestReference& ref);
  /// A recurrent layer's recorded state against the reference's after the step's stream.
  void compareState(StepAnalysis& a, size_t layer, const TraceLayerRecord& rec, const RequestReference& ref);
  const RequestReference* lookup(uint64_t version);
  void checkStaleValues(StepAnalysis& a, const RequestReference* current);
  /// max |rebuilt cache column c of layer l - ref[:, p, :]| over heads, keys and values, and max
  /// |ref|.
  std::pair<double, double> rebuiltColumnDiff(size_t l, int64_t c, const RequestReference& ref,
                                              int64_t p) const;

  const Trace& trace_;
  const TraceRequest& request_;
  const Tolerance& tol_;
  bool rowScaled_;  // a per_token_head quantised cache: each row's absmax is stored exactly
  ReferenceLookup reference_;
  std::vector<int64_t> stream_;
  // The cache rebuilt from appended records, per layer (columns into the trace's records).
  std::vector<RebuiltCacheRow> rows_;
  std::vector<int64_t> length_;                 // per layer
  std::vector<std::vector<uint64_t>>
      columnVersion_;  // per layer, per cache column: weights version
  std::vector<std::vector<int64_t>>
      columnStream_;  // per layer, per cache column: stream index (-1 pad)
  std::vector<std::vector<int64_t>>
      columnPosition_;                  // per layer, per cache column: position id fed (-1 pad)
  std::vector<int64_t> fedPositions_;   // the cache's real entries: position ids, in order
  std::vector<int64_t> fedCacheIndex_;  // and the cache index each took (pads counted)
  int64_t cacheEntries_ = 0;            // entries the cache took (pads in, rejected out)
  bool staleSeen_ = false;  // a step of this cache already mixed weights versions
  MissingReason whyMissing_;
  std::string lastMissingReason_;
};

}  // namespace kvscope::detail
