#include "audit/rows/layer_rope_theta/LayerRopeThetaEvidence.hpp"

#include "audit/NumberText.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "model/RotaryEmbedding.hpp"

namespace kvscope::detail {

namespace {

std::string ropeText(const RopeConfig& r) {
  std::string s = "theta " + numberText(r.theta);
  if (r.type == "default") return s + ", unscaled";
  return s + ", " + r.type + " x " + numberText(r.factor);
}

}  // namespace

bool LayerRopeThetaEvidence::applies() const {
  return config_.usesRope() && config_.keyRecordsAreRotatedHeads() && config_.slidingRope && !(*config_.slidingRope == config_.rope);
}

std::optional<LayerRopeThetaMatch> LayerRopeThetaEvidence::explain(
    const std::vector<const StepAnalysis*>& steps, const RequestReference& own) const {
  if (steps.empty() || !applies()) return std::nullopt;
  const int64_t layer = steps.front()->firstBadLayer;
  if (layer < 0 || !config_.ropeOn(layer)) return std::nullopt;
  LayerRopeThetaMatch m;
  m.slidingLayer = config_.isSlidingLayer(layer);
  m.own = config_.ropeFor(layer);
  m.other = m.slidingLayer ? config_.rope : *config_.slidingRope;
  const RotaryEmbedding mine = RotaryEmbedding::forLayer(config_, layer);
  const RotaryEmbedding other(m.other, config_.headDim, config_.maxPositions);
  auto rotatedOtherwise = [&](const torch::Tensor& refCols, const torch::Tensor& p) {
    auto [cos, sin] = mine.cosSin(p.view({1, -1}));
    auto [otherCos, otherSin] = other.cosSin(p.view({1, -1}));
    return RotaryEmbedding::apply(RotaryEmbedding::apply(refCols, cos, -sin), otherCos, otherSin);
  };
  auto keys = matchKeyRecords(steps, own, tol_, config_.headDim, rotatedOtherwise);
  if (!keys) return std::nullopt;
  m.keys = *keys;
  for (int64_t l = 0; l < layer; ++l) ++(config_.isSlidingLayer(l) ? m.exactSliding : m.exactFull);
  return m;
}

FindingDraft LayerRopeThetaEvidence::finding(const StepAnalysis& a, const LayerRopeThetaMatch& m,
                                             std::map<std::string, double> ev) {
  addKeyRecordEvidence(ev, m.keys, "other_rope_key_error");
  ev["sliding_layer"] = m.slidingLayer ? 1.0 : 0.0;
  ev["layer_rope_theta"] = m.own.theta;
  ev["used_rope_theta"] = m.other.theta;
  ev["exact_earlier_sliding_layers"] = static_cast<double>(m.exactSliding);
  ev["exact_earlier_full_layers"] = static_cast<double>(m.exactFull);
  const std::string kind = m.slidingLayer ? "sliding" : "full-attention";
  const std::string otherKind = m.slidingLayer ? "full-attention" : "sliding";
  std::string ex =
      "layer " + std::to_string(m.keys.layer) + " is a " + kind + " layer, which rotates with " +
      ropeText(m.own) + " by the checkpoint, but its new keys differ from the reference (key "
      "error " + numberText(m.keys.firstKeyError) + " at position " +
      std::to_string(m.keys.firstPosition) + ", " + numberText(m.keys.lastKeyError) +
      " at position " + std::to_string(m.keys.lastPosition) + ") while its values are exact "
      "(value error " + numberText(m.keys.valueError) + "): every one of its " +
      std::to_string(m.keys.records) + " key record(s) equals the reference key rotated with the " +
      otherKind + " layers' RoPE instead (" + ropeText(m.other) + "; max diff " +
      numberText(m.keys.hypothesisError) + ", tolerance " + numberText(m.keys.tolerance) +
      "), as a path with one RoPE for both layer types computes it. The layers before it are "
      "exact (" + std::to_string(m.exactSliding) + " sliding, " + std::to_string(m.exactFull) +
      " full-attention)";
  return keyRecordFinding(finding::LayerRopeTheta, a, m.keys, std::move(ex), "both rotations are the identity there", std::move(ev));
}

}  // namespace kvscope::detail
