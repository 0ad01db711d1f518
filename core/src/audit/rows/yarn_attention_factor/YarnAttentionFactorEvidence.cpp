#include "audit/rows/yarn_attention_factor/YarnAttentionFactorEvidence.hpp"

#include <cmath>

#include "audit/NumberText.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "model/RotaryEmbedding.hpp"

namespace kvscope::detail {

// Latent attention included: there the rotated features are the roped key parts the value
// records hold (explain() reads those).
bool YarnAttentionFactorEvidence::applies() const { return RotaryEmbedding::attentionFactorOf(config_) != 1.0; }

std::optional<YarnAttentionFactorMatch> YarnAttentionFactorEvidence::explain(
    const std::vector<const StepAnalysis*>& steps, const RequestReference& own) const {
  if (steps.empty() || !applies()) return std::nullopt;
  const int64_t layer = steps.front()->firstBadLayer;
  if (layer < 0 || !config_.ropeOn(layer) || !(config_.ropeFor(layer) == config_.rope)) return std::nullopt;
  const RopeConfig& rope = config_.rope;
  const double right = RotaryEmbedding::attentionFactorOf(rope);
  const int64_t d = config_.rotaryHeadDim(), r = RotaryEmbedding::rotaryDim(rope, d);
  const RotatedRecords turned = config_.keyRecordsAreRotatedHeads() ? RotatedRecords::Keys : RotatedRecords::Values;
  // The factors a path may have turned with, in the order the header lists them.
  std::vector<std::pair<int, double>> candidates = {{1, 1.0}};
  const double fallback = rope.factor <= 1 ? 1.0 : 0.1 * std::log(rope.factor) + 1.0;
  if (std::fabs(fallback - right) > 1e-6 && fallback != 1.0) candidates.push_back({2, fallback});
  candidates.push_back({3, right * right});
  for (const auto& [h, factor] : candidates) {
    const double ratio = factor / right;
    auto scaled = [&, ratio = ratio](const torch::Tensor& refCols, const torch::Tensor&) {
      auto out = refCols.clone();
      out.narrow(-1, 0, r).mul_(ratio);  // only the rotated features carry the factor
      return out;
    };
    if (auto keys = matchKeyRecords(steps, own, tol_, d, scaled, turned))
      return YarnAttentionFactorMatch{*keys, h, right, factor};
  }
  return std::nullopt;
}

FindingDraft YarnAttentionFactorEvidence::finding(const StepAnalysis& a, const YarnAttentionFactorMatch& m,
                                                  std::map<std::string, double> ev) {
  addKeyRecordEvidence(ev, m.keys, "rescaled_key_error");
  ev["hypothesis"] = static_cast<double>(m.hypothesis);
  ev["checkpoint_attention_factor"] = m.checkpointFactor;
  ev["path_attention_factor"] = m.pathFactor;
  static const char* const why[] = {"", "no attention factor at all (cos and sin unscaled)",
                                    "0.1 ln(factor) + 1, the default, in place of the checkpoint's "
                                    "attention_factor or mscale / mscale_all_dim ratio",
                                    "the attention factor applied twice"};
  const auto [turned, other] = recordNames(m.keys);
  std::string ex = "layer " + std::to_string(m.keys.layer) + "'s new " + turned +
                   " differ from the reference at every position (error " +
                   numberText(m.keys.firstKeyError) + " at position " + std::to_string(m.keys.firstPosition) +
                   ") while its " + other + " are exact (error " + numberText(m.keys.valueError) +
                   "): every one of its " + std::to_string(m.keys.records) + " record(s) of " + turned +
                   " equals the reference's with its rotated features scaled by " +
                   numberText(m.pathFactor / m.checkpointFactor) + " (max diff " +
                   numberText(m.keys.hypothesisError) + ", tolerance " + numberText(m.keys.tolerance) +
                   "): the path turned with attention factor " + numberText(m.pathFactor) +
                   " where the checkpoint's RoPE multiplies cos and sin by " +
                   numberText(m.checkpointFactor) + " (" + why[m.hypothesis] + ")";
  return keyRecordFinding(finding::YarnAttentionFactor, a, m.keys, std::move(ex),
                          "the factor scales every position", std::move(ev));
}

}  // namespace kvscope::detail
