// Evidence for an absorbed latent attention whose weights do not match the latent (mla_absorb):
// on a checkpoint with multi-head latent attention (DeepSeek V3), a decode path absorbs
// kv_b_proj into the queries (scores against the cached latent rows) and into the output (the
// latent context through the value rows), but splits the matrix as every head's key rows, then
// every head's value rows, where the checkpoint holds per head [key rows | value rows]. The
// layer's latent rows are exact (they come before attention); the next layer's differ, or only
// the logits after the last layer; the prefill, which decompresses, is right. The shared check
// (audit/DroppedFeatureHypothesis) finds the uncached pass with those weights that reproduces
// the run; this builds the finding.
#pragma once

#include <map>
#include <string>

#include "audit/DroppedFeatureHypothesis.hpp"
#include "audit/FindingBuilder.hpp"

namespace kvscope::detail {

class MlaAbsorbEvidence {
 public:
  static FindingDraft finding(const StepAnalysis& a, const DroppedFeatureMatch& m,
                              std::map<std::string, double> evidence);
};

}  // namespace kvscope::detail
