// Evidence for partial rotary mishandled (partial_rotary): on a checkpoint that rotates only
// the first r = int(head_dim * partial_rotary_factor) features of each head (Phi-3,
// Phi-4-mini; transformers pairs feature i with i + r/2 and turns pair i by theta^(-2i/r)),
// a layer's new keys differ from the reference while its values are exact, and every record
// equals the reference key unrotated and rotated over the whole head (pairs i, i + d/2) with
// one of the frequency sets engines shipped:
//   1. the whole head: theta^(-2i/d) for every pair (partial_rotary_factor ignored);
//   2. the head width's frequencies on the first r/2 pairs only, the rest unturned
//      (pie-project/pie#603);
//   3. the rotary frequencies theta^(-2i/r) zero-padded to d/2, so the right angles turn
//      the wrong partners (labscommunity/cascadia#69).
// At position 0 every rotation is the identity; the error grows with position.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "audit/FindingBuilder.hpp"
#include "audit/KeyRecordHypothesis.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/AuditResult.hpp"
#include "kvscope/ModelConfig.hpp"

namespace kvscope::detail {

struct PartialRotaryMatch {
  KeyRecordMatch keys;
  int hypothesis = 0;        // 1, 2 or 3 (above)
  int64_t rotaryDim = 0;     // r by the checkpoint
  int64_t headDim = 0;       // d
};

class PartialRotaryEvidence {
 public:
  PartialRotaryEvidence(const ModelConfig& config, const Tolerance& tol) : config_(config), tol_(tol) {}
  /// Whether the checkpoint rotates part of each head (r < d).
  bool applies() const;
  /// `steps`: the request's analyses from its first divergence on (the first one first).
  std::optional<PartialRotaryMatch> explain(const std::vector<const StepAnalysis*>& steps,
                                            const RequestReference& own) const;
  static FindingDraft finding(const StepAnalysis& a, const PartialRotaryMatch& m,
                              std::map<std::string, double> evidence);
  /// What hypothesis `h` computes, in words.
  static std::string hypothesisText(int h, int64_t rotaryDim, int64_t headDim);

 private:
  const ModelConfig& config_;
  const Tolerance& tol_;
};

}  // namespace kvscope::detail
