#include "audit/rows/qk_norm_order/QkNormOrderEvidence.hpp"

#include <algorithm>
#include <cmath>

#include "audit/NumberText.hpp"
#include "model/Norms.hpp"
#include "model/RotaryEmbedding.hpp"
#include "model/TorchTapSink.hpp"

namespace kvscope::detail {

std::optional<QkNormOrderMatch> QkNormOrderEvidence::explain(
    const std::vector<const StepAnalysis*>& steps, const RequestReference& own,
    const FloatTensor& weight) const {
  if (steps.empty() || weight.data.empty() || !config_.usesRope()) return std::nullopt;
  const int64_t layer = steps.front()->firstBadLayer;
  if (layer < 0 || static_cast<size_t>(layer) >= own.keys.size()) return std::nullopt;
  // [d] (or [h * d]): what the norm multiplies by ((1 + w) for Gemma's norm).
  const torch::Tensor w = rmsMultiplier(fromFloatTensor(weight), config_.recipe.norm).to(torch::kDouble);
  const double wMin = w.abs().min().item<double>(), wMax = w.abs().max().item<double>();
  if (wMin < 1e-6 * std::max(wMax, 1e-30)) return std::nullopt;  // a zero weight: no inverse
  const FloatTensor& refK = own.keys[static_cast<size_t>(layer)];
  const int64_t d = config_.headDim;
  if (refK.shape.size() != 3 || refK.shape[2] != d) return std::nullopt;
  // The weight per head ([d]) or over the whole projection ([h * d], OLMo 2): either way the
  // norm divides by a root mean square that the rotation leaves as it is.
  torch::Tensor wk;
  if (w.numel() == d)
    wk = w;
  else if (w.numel() == refK.shape[0] * d)
    wk = w.view({refK.shape[0], 1, d});
  else
    return std::nullopt;
  const RotaryEmbedding rope = RotaryEmbedding::forLayer(config_, layer);
  // The reference keys of these positions, unrotated, divided by w, rotated, times w.
  auto swapped = [&](const torch::Tensor& refCols, const torch::Tensor& p) {
    auto [cos, sin] = rope.cosSin(p.view({1, -1}));  // [1, n, d]
    const auto u = RotaryEmbedding::apply(refCols, cos, -sin).to(torch::kDouble) / wk;
    return wk * RotaryEmbedding::apply(u, cos.to(torch::kDouble), sin.to(torch::kDouble));
  };
  auto keys = matchKeyRecords(steps, own, tol_, d, swapped);
  if (!keys) return std::nullopt;
  return QkNormOrderMatch{*keys, wMax / wMin};
}

FindingDraft QkNormOrderEvidence::finding(const StepAnalysis& a, const QkNormOrderMatch& m,
                                          std::map<std::string, double> ev) {
  addKeyRecordEvidence(ev, m.keys, "swapped_order_key_error");
  ev["k_norm_weight_spread"] = m.weightSpread;
  const std::string layer = std::to_string(m.keys.layer);
  std::string ex =
      "layer " + layer + "'s new keys differ from the reference (key error " +
      numberText(m.keys.firstKeyError) + " at position " + std::to_string(m.keys.firstPosition) + ", " +
      numberText(m.keys.lastKeyError) + " at position " + std::to_string(m.keys.lastPosition) +
      ") while its values are exact (value error " + numberText(m.keys.valueError) +
      "): every one of its " + std::to_string(m.keys.records) +
      " key record(s) equals the reference key with the per-head k_norm applied after RoPE "
      "instead of before it (max diff " + numberText(m.keys.hypothesisError) + ", tolerance " +
      numberText(m.keys.tolerance) + "), re-derived from the checkpoint's k_norm weight (its "
      "entries span a factor " + numberText(m.weightSpread) + ")";
  ex += ". The queries are not recorded; a path that swaps the order for the keys swaps it for "
        "q_norm too, as one fused norm + rotary kernel does";
  return keyRecordFinding(finding::QkNormOrder, a, m.keys, std::move(ex), "RoPE is the identity there and both orders agree", std::move(ev));
}

}  // namespace kvscope::detail
