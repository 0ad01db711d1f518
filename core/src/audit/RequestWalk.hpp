// Walks one request's recorded steps in order, aligning what was fed with the request's
// own stream (prompt + generated), rebuilding its cache from the appended records, and
// measuring every record and logits row against the reference of the step's weights.
#pragma once

#include <functional>
#include <vector>

#include "audit/StepAnalysis.hpp"
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
  void compareRecords(StepAnalysis& a, size_t layer, const TraceLayerRecord& rec, const RequestReference& ref);
  void compareLogits(StepAnalysis& a, const RequestReference& ref);
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
  // The cache rebuilt from appended records: [layer][head] -> t*d floats.
  std::vector<std::vector<std::vector<float>>> keys_, values_;
  std::vector<int64_t> length_;                 // per layer
  std::vector<std::vector<uint64_t>>
      columnVersion_;  // per layer, per cache column: weights version
  std::vector<std::vector<int64_t>>
      columnStream_;  // per layer, per cache column: stream index (-1 pad)
  bool staleSeen_ = false;  // a step of this cache already mixed weights versions
  MissingReason whyMissing_;
  std::string lastMissingReason_;
};

}  // namespace kvscope::detail
