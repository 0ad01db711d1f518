#include "audit/rows/score_mscale/ScoreMscaleEvidence.hpp"

#include "kvscope/FailureMatrix.hpp"

namespace kvscope::detail {

FindingDraft ScoreMscaleEvidence::finding(const StepAnalysis& a, const DroppedFeatureMatch& m,
                                          std::map<std::string, double> ev) {
  return droppedFeatureFinding(
      a, m,
      {finding::ScoreMscale, "unscaled_softmax", "scores", "score",
       "with the softmax scale qk_head_dim^-0.5 alone, without yarn's mscale(factor, mscale_all_dim)^2 "
       "that the checkpoint's attention multiplies it by",
       "as an attention that builds its scale from the head size and ignores rope_scaling's "
       "mscale_all_dim computes them (transformers 4.x's DeepseekV2Attention)",
       "a query with one key gives it weight 1 at any scale"},
      std::move(ev));
}

}  // namespace kvscope::detail
