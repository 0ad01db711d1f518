// Evidence for no_rope_layers read inverted (nope_layer_rope): on a checkpoint with NoPE
// layers (SmolLM3, Llama 4), a layer's new keys differ from the reference while its values
// are exact, and every record equals the reference key with the layer's rotation toggled: a
// NoPE layer's keys rotated to their positions (R_p(ref)), a rotary layer's left unrotated
// (R_p^-1(ref)). At position 0 the rotation is the identity and both readings agree.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "audit/FindingBuilder.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/AuditResult.hpp"
#include "kvscope/ModelConfig.hpp"

namespace kvscope::detail {

struct NopeLayerRopeMatch {
  int64_t layer = -1;
  bool layerRotates = false;  // the checkpoint says the layer rotates (the path did not)
  double toggledError = 0;    // max |record - reference key with the rotation toggled|
  double tolerance = 0;       // the largest record tolerance among them
  double ownError = 0;        // max |record key - reference key|
  int64_t records = 0, diverged = 0;
  int64_t firstPosition = -1, lastPosition = -1;
  double firstKeyError = 0, lastKeyError = 0;
  double valueError = 0;
  bool positionZeroExact = false;
};

class NopeLayerRopeEvidence {
 public:
  NopeLayerRopeEvidence(const ModelConfig& config, const Tolerance& tol) : config_(config), tol_(tol) {}
  /// `steps`: the request's analyses from its first divergence on (the first one first).
  std::optional<NopeLayerRopeMatch> explain(const std::vector<const StepAnalysis*>& steps,
                                            const RequestReference& own) const;
  static FindingDraft finding(const StepAnalysis& a, const NopeLayerRopeMatch& m,
                              std::map<std::string, double> evidence);

 private:
  const ModelConfig& config_;
  const Tolerance& tol_;
};

}  // namespace kvscope::detail
