// Evidence for a q/k norm applied after RoPE instead of before it (qk_norm_order): on a
// checkpoint whose attention normalises each head's queries and keys (q_norm/k_norm, Qwen3),
// a layer's new keys differ from the reference while its values are exact, and every record
// equals the reference key with the order swapped, re-derived from the checkpoint's k_norm
// weight w. RMS is unchanged by a rotation R_p, so with u = k / rms(k) the reference holds
// R_p(w * u) and the swapped path w * R_p(u): u = R_p^-1(reference) / w, the record's
// hypothesis w * R_p(u). At position 0 the rotation is the identity and both orders agree.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "audit/FindingBuilder.hpp"
#include "audit/KeyRecordHypothesis.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/AuditResult.hpp"
#include "kvscope/FloatTensor.hpp"
#include "kvscope/ModelConfig.hpp"

namespace kvscope::detail {

struct QkNormOrderMatch {
  KeyRecordMatch keys;        // hypothesis: the reference key with k_norm after RoPE
  double weightSpread = 0;    // max |w| / min |w|: 1 would make the two orders equal
};

class QkNormOrderEvidence {
 public:
  /// `weight`: the layer's k_norm weight [d] (the checkpoint's; empty: nothing to check).
  QkNormOrderEvidence(const ModelConfig& config, const Tolerance& tol) : config_(config), tol_(tol) {}
  /// `steps`: the request's analyses from its first divergence on (the first one first).
  std::optional<QkNormOrderMatch> explain(const std::vector<const StepAnalysis*>& steps,
                                          const RequestReference& own,
                                          const FloatTensor& weight) const;
  static FindingDraft finding(const StepAnalysis& a, const QkNormOrderMatch& m,
                              std::map<std::string, double> evidence);

 private:
  const ModelConfig& config_;
  const Tolerance& tol_;
};

}  // namespace kvscope::detail
