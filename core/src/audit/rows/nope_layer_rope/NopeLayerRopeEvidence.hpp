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
#include "audit/KeyRecordHypothesis.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/AuditResult.hpp"
#include "kvscope/ModelConfig.hpp"

namespace kvscope::detail {

struct NopeLayerRopeMatch {
  KeyRecordMatch keys;        // hypothesis: the reference key with the rotation toggled
  bool layerRotates = false;  // the checkpoint says the layer rotates (the path did not)
};

class NopeLayerRopeEvidence {
 public:
  NopeLayerRopeEvidence(const ModelConfig& config, const Tolerance& tol) : config_(config), tol_(tol) {}
  /// Whether the checkpoint has NoPE layers (a no_rope_layers list with a 0 to read inverted).
  bool applies() const;
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
