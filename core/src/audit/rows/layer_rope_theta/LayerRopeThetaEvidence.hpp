// Evidence for a layer rotated with the other layer type's RoPE (layer_rope_theta): on a
// checkpoint whose sliding layers have a RoPE of their own (Gemma 3: rope_local_base_freq,
// unscaled, beside the full-attention layers' rope_theta and rope_scaling), a layer's new keys
// differ from the reference while its values are exact, and every record equals the reference
// key unrotated with the layer's RoPE and rotated with the other one. At position 0 both
// rotations are the identity; the error grows with position.
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

struct LayerRopeThetaMatch {
  KeyRecordMatch keys;        // hypothesis: the reference key rotated with the other RoPE
  bool slidingLayer = false;  // the layer slides (it rotated with the full-attention RoPE)
  RopeConfig own, other;      // the layer's RoPE by the checkpoint, and the one it used
  int64_t exactSliding = 0, exactFull = 0;  // earlier layers of each type, all exact
};

class LayerRopeThetaEvidence {
 public:
  LayerRopeThetaEvidence(const ModelConfig& config, const Tolerance& tol) : config_(config), tol_(tol) {}
  /// Whether the checkpoint has two RoPEs to mix up (config.slidingRope differs from rope).
  bool applies() const;
  /// `steps`: the request's analyses from its first divergence on (the first one first).
  std::optional<LayerRopeThetaMatch> explain(const std::vector<const StepAnalysis*>& steps,
                                             const RequestReference& own) const;
  static FindingDraft finding(const StepAnalysis& a, const LayerRopeThetaMatch& m,
                              std::map<std::string, double> evidence);

 private:
  const ModelConfig& config_;
  const Tolerance& tol_;
};

}  // namespace kvscope::detail
