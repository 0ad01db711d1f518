#include "audit/rows/mla_absorb/MlaAbsorbEvidence.hpp"

#include "kvscope/FailureMatrix.hpp"

namespace kvscope::detail {

FindingDraft MlaAbsorbEvidence::finding(const StepAnalysis& a, const DroppedFeatureMatch& m,
                                        std::map<std::string, double> ev) {
  return droppedFeatureFinding(
      a, m,
      {finding::MlaAbsorb, "absorbed", "attends", "attend",
       "in the absorbed form with kv_b_proj split as every head's key rows, then every head's "
       "value rows (the checkpoint holds per head [qk_nope_head_dim key rows | v_head_dim value "
       "rows]): its queries and its output go through weights that do not match the latent",
       "as a decode path whose absorbed weights were built with the wrong layout computes them; "
       "its own latent rows are exact, and a prefill that decompresses the latent is right",
       ""},
      std::move(ev));
}

}  // namespace kvscope::detail
