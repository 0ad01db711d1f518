// Evidence for a softmax scale without yarn's mscale (score_mscale): on a checkpoint whose
// attention scales its scores by qk_head_dim^-0.5 times yarn's mscale(factor, mscale_all_dim)^2
// (DeepSeek V2 and V3 with a yarn rope_scaling), a path scores with qk_head_dim^-0.5 alone.
// The layer's records are exact (they come before the scores); the next layer's differ, or
// only the logits after the last layer; position 0 is right (a query with one key gives it
// weight 1 at any scale). The shared check (audit/DroppedFeatureHypothesis) finds the uncached
// pass so scored that reproduces the run; this builds the finding.
#pragma once

#include <map>
#include <string>

#include "audit/DroppedFeatureHypothesis.hpp"
#include "audit/FindingBuilder.hpp"

namespace kvscope::detail {

class ScoreMscaleEvidence {
 public:
  static FindingDraft finding(const StepAnalysis& a, const DroppedFeatureMatch& m,
                              std::map<std::string, double> evidence);
};

}  // namespace kvscope::detail
