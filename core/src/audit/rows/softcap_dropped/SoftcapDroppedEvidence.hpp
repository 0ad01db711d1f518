// Evidence for an attention soft-cap dropped by the cached path (softcap_dropped): on a
// checkpoint with attn_logit_softcapping (Gemma 2), a layer computes its scores without
// tanh(s / cap) * cap. The shared check (audit/DroppedFeatureHypothesis) finds the layer and
// the uncached pass that reproduces the run; this builds the finding. Position 0 is right: a
// query with one key attends to it with weight 1 whatever the cap.
#pragma once

#include <map>
#include <string>

#include "audit/DroppedFeatureHypothesis.hpp"
#include "audit/FindingBuilder.hpp"

namespace kvscope::detail {

class SoftcapDroppedEvidence {
 public:
  static FindingDraft finding(const StepAnalysis& a, const DroppedFeatureMatch& m, double cap,
                              std::map<std::string, double> evidence);
};

}  // namespace kvscope::detail
