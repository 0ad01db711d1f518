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
  RequestWalk(const Trace& trace, const TraceRequest& request, const Tolerance& tolerance,
              ReferenceLookup reference);
  std::vector<StepAnalysis> run();
  /// The request's intended stream: prompt + generated.
  static std::vector<int64_t> streamOf(const TraceRequest& r);

 private:
  void alignStream(StepAnalysis& a, const std::vector<int64_t>& real, int64_t& streamPos);
  void checkPositions(StepAnalysis& a, const std::vector<int64_t>& real);
  void checkCache(StepAnalysis& a, size_t layer, const TraceLayerRecord& rec);
  void compareRecords(StepAnalysis& a, size_t layer, const TraceLayerRecord& rec, const RequestReference& ref);
  void compareLogits(StepAnalysis& a, const RequestReference& ref);

  const Trace& trace_;
  const TraceRequest& request_;
  const Tolerance& tol_;
  ReferenceLookup reference_;
  std::vector<int64_t> stream_;
  // The cache rebuilt from appended records: [layer][head] -> t*d floats.
  std::vector<std::vector<std::vector<float>>> keys_, values_;
  std::vector<int64_t> length_;                 // per layer
  std::vector<std::vector<uint64_t>> versions_;  // per layer: versions of the records held
};

}  // namespace kvscope::detail
