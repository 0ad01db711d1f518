#include "audit/rows/sink_dropped/SinkDroppedEvidence.hpp"

#include "kvscope/FailureMatrix.hpp"

namespace kvscope::detail {

FindingDraft SinkDroppedEvidence::finding(const StepAnalysis& a, const DroppedFeatureMatch& m,
                                          std::map<std::string, double> ev) {
  return droppedFeatureFinding(
      a, m,
      {finding::SinkDropped, "sinkless", "runs", "run",
       "attention as a plain softmax, without the checkpoint's learned sinks (self_attn.sinks: "
       "one logit per head that takes its share of every query's softmax)",
       "as a kernel path without sink support computes them; unlike a dropped soft-cap, "
       "position 0 is wrong too (with a sink, one key gets less than all the weight)",
       ""},
      std::move(ev));
}

}  // namespace kvscope::detail
