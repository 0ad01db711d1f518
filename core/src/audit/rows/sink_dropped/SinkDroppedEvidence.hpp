// Evidence for attention sinks dropped by the cached path (sink_dropped): on a checkpoint with
// learned sinks (GPT-OSS's self_attn.sinks: one logit per head that joins each query's softmax
// and is dropped after it), a layer's attention runs as a plain softmax. Its K/V records are
// exact; the next layer's differ from position 0 on (even one key gets weight below 1 with a
// sink), or only the logits after the last layer. The shared check
// (audit/DroppedFeatureHypothesis) finds the uncached pass without the sinks that reproduces
// the run; this builds the finding.
#pragma once

#include <map>
#include <string>

#include "audit/DroppedFeatureHypothesis.hpp"
#include "audit/FindingBuilder.hpp"

namespace kvscope::detail {

class SinkDroppedEvidence {
 public:
  static FindingDraft finding(const StepAnalysis& a, const DroppedFeatureMatch& m,
                              std::map<std::string, double> evidence);
};

}  // namespace kvscope::detail
