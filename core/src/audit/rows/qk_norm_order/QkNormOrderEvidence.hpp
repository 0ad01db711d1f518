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
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/AuditResult.hpp"
#include "kvscope/FloatTensor.hpp"
#include "kvscope/ModelConfig.hpp"

namespace kvscope::detail {

struct QkNormOrderMatch {
  int64_t layer = -1;
  double swappedError = 0;    // max |record - swapped-order key| over every record compared
  double tolerance = 0;       // the largest record tolerance among them
  double ownError = 0;        // max |record key - reference key|
  int64_t records = 0;        // key records compared (every real column of the steps)
  int64_t diverged = 0;       // among them, those outside tolerance of the reference
  int64_t firstPosition = -1, lastPosition = -1;  // first and last diverged stream positions
  double firstKeyError = 0, lastKeyError = 0;
  double valueError = 0;      // max value error of the layer over the compared steps
  double weightSpread = 0;    // max |w| / min |w|: 1 would make the two orders equal
  bool positionZeroExact = false;  // a record at position 0 was compared and is right
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
