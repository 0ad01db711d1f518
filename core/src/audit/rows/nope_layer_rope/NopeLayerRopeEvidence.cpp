#include "audit/rows/nope_layer_rope/NopeLayerRopeEvidence.hpp"

#include <algorithm>

#include "audit/NumberText.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "model/RotaryEmbedding.hpp"

namespace kvscope::detail {

bool NopeLayerRopeEvidence::applies() const {
  return config_.usesRope() && config_.keyRecordsAreRotatedHeads() &&
         std::find(config_.ropeLayers.begin(), config_.ropeLayers.end(), false) != config_.ropeLayers.end();
}

std::optional<NopeLayerRopeMatch> NopeLayerRopeEvidence::explain(
    const std::vector<const StepAnalysis*>& steps, const RequestReference& own) const {
  if (steps.empty() || !applies()) return std::nullopt;
  const int64_t layer = steps.front()->firstBadLayer;
  if (layer < 0) return std::nullopt;
  const RotaryEmbedding rope = RotaryEmbedding::forLayer(config_, layer);
  const bool rotates = config_.ropeOn(layer);
  // The reference with the layer's rotation toggled: undone where it rotates, done where it
  // does not.
  auto toggled = [&](const torch::Tensor& refCols, const torch::Tensor& p) {
    auto [cos, sin] = rope.cosSin(p.view({1, -1}));
    return RotaryEmbedding::apply(refCols, cos, rotates ? -sin : sin);
  };
  auto keys = matchKeyRecords(steps, own, tol_, config_.headDim, toggled);
  if (!keys) return std::nullopt;
  return NopeLayerRopeMatch{*keys, rotates};
}

FindingDraft NopeLayerRopeEvidence::finding(const StepAnalysis& a, const NopeLayerRopeMatch& m,
                                            std::map<std::string, double> ev) {
  addKeyRecordEvidence(ev, m.keys, "toggled_rotation_key_error");
  ev["layer_rotates"] = m.layerRotates ? 1.0 : 0.0;
  const std::string layer = std::to_string(m.keys.layer);
  std::string ex =
      "layer " + layer + " is a " + (m.layerRotates ? "rotary" : "NoPE") +
      " layer by the checkpoint's no_rope_layers, but its new keys differ from the reference "
      "(key error " + numberText(m.keys.firstKeyError) + " at position " +
      std::to_string(m.keys.firstPosition) + ", " + numberText(m.keys.lastKeyError) + " at position " +
      std::to_string(m.keys.lastPosition) + ") while its values are exact (value error " +
      numberText(m.keys.valueError) + "): every one of its " + std::to_string(m.keys.records) +
      " key record(s) equals the reference key " +
      (m.layerRotates ? "left unrotated" : "rotated to its position") + " (max diff " +
      numberText(m.keys.hypothesisError) + ", tolerance " + numberText(m.keys.tolerance) +
      "), as a path that reads no_rope_layers inverted (1 = rotary, 0 = NoPE) computes it";
  return keyRecordFinding(finding::NopeLayerRope, a, m.keys, std::move(ex), "the rotation is the identity there", std::move(ev));
}

}  // namespace kvscope::detail
