#include "audit/rows/softcap_dropped/SoftcapDroppedEvidence.hpp"

#include "audit/NumberText.hpp"
#include "kvscope/FailureMatrix.hpp"

namespace kvscope::detail {

FindingDraft SoftcapDroppedEvidence::finding(const StepAnalysis& a, const DroppedFeatureMatch& m,
                                             double cap, std::map<std::string, double> ev) {
  ev["softcap"] = cap;
  const std::string c = numberText(cap);
  return droppedFeatureFinding(
      a, m,
      {finding::SoftcapDropped, "uncapped", "computes", "compute",
       "the attention scores without the checkpoint's soft-cap (attn_logit_softcapping " + c +
           ": tanh(s / " + c + ") * " + c + " skipped)",
       "as a kernel path without soft-capping computes them",
       "one key gets weight 1 whatever the cap"},
      std::move(ev));
}

}  // namespace kvscope::detail
