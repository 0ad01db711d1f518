#include "audit/rows/qk_norm_order/QkNormOrderEvidence.hpp"

#include <algorithm>
#include <cmath>

#include "audit/ColumnDiff.hpp"
#include "audit/NumberText.hpp"
#include "model/RotaryEmbedding.hpp"
#include "model/TorchTapSink.hpp"

namespace kvscope::detail {

std::optional<QkNormOrderMatch> QkNormOrderEvidence::explain(
    const std::vector<const StepAnalysis*>& steps, const RequestReference& own,
    const FloatTensor& weight) const {
  if (steps.empty() || weight.data.empty() || !config_.usesRope()) return std::nullopt;
  const StepAnalysis& first = *steps.front();
  if (first.firstBadLayer < 0) return std::nullopt;
  const auto l = static_cast<size_t>(first.firstBadLayer);
  if (l >= own.keys.size() || l >= first.keyError.size()) return std::nullopt;
  auto valuesExact = [&](const StepAnalysis& a) {
    return a.valueError.size() > l && a.valueError[l] <= a.valueTol[l];
  };
  if (!valuesExact(first) || first.keyError[l] <= first.keyTol[l]) return std::nullopt;
  const torch::Tensor w = fromFloatTensor(weight).to(torch::kDouble);  // [d]
  const double wMin = w.abs().min().item<double>(), wMax = w.abs().max().item<double>();
  if (wMin < 1e-6 * std::max(wMax, 1e-30)) return std::nullopt;  // a zero weight: no inverse
  const FloatTensor& refK = own.keys[l];
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
  const RotaryEmbedding rope(config_);
  const torch::Tensor ref = fromFloatTensor(refK);  // [h, T, d]

  QkNormOrderMatch m;
  m.layer = first.firstBadLayer;
  m.weightSpread = wMax / wMin;
  for (const StepAnalysis* a : steps) {
    if (a->structural() || a->version != first.version || a->referenceMissing) break;
    if (a != &first && !valuesExact(*a)) break;  // from here something else is wrong too
    if (l >= a->step->layers.size()) break;
    const FloatTensor& rec = a->step->layers[l].keys;
    if (rec.shape.size() != 3 || rec.shape[0] != refK.shape[0] || rec.shape[2] != d) break;
    std::vector<int64_t> cols, pos;
    for (size_t j = 0; j < a->streamIndex.size(); ++j) {
      const int64_t p = a->streamIndex[j];
      if (p < 0 || p >= refK.shape[1] || static_cast<int64_t>(j) >= rec.shape[1]) continue;
      cols.push_back(static_cast<int64_t>(j));
      pos.push_back(p);
    }
    if (cols.empty()) continue;
    const auto n = static_cast<int64_t>(cols.size());
    const auto p = torch::tensor(pos, torch::kLong);
    // The reference keys of these positions, unrotated, divided by w, rotated, times w.
    auto [cos, sin] = rope.cosSin(p.view({1, n}));  // [1, n, d]
    const auto refCols = ref.index_select(1, p).unsqueeze(0);  // [1, h, n, d]
    const auto u = RotaryEmbedding::apply(refCols, cos, -sin).to(torch::kDouble) / wk;
    const auto swapped =
        (wk * RotaryEmbedding::apply(u, cos.to(torch::kDouble), sin.to(torch::kDouble)))
            .to(torch::kFloat)
            .squeeze(0)
            .contiguous();  // [h, n, d]
    const FloatTensor hyp = toFloatTensor(swapped);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = cols[static_cast<size_t>(i)], sp = pos[static_cast<size_t>(i)];
      const ColumnDiff own_ = columnDiff(rec, c, refK, sp);
      const ColumnDiff alt = columnDiff(rec, c, hyp, i);
      const double t = tol_.forRecord(static_cast<int64_t>(l), sp, own_.mag);
      m.swappedError = std::max(m.swappedError, alt.err);
      m.tolerance = std::max(m.tolerance, t);
      m.ownError = std::max(m.ownError, own_.err);
      ++m.records;
      if (alt.err > t) return std::nullopt;  // one record the swapped order does not give
      if (own_.err <= t) {
        if (sp == 0) m.positionZeroExact = true;
        continue;
      }
      if (m.diverged++ == 0) {
        m.firstPosition = sp;
        m.firstKeyError = own_.err;
      }
      m.lastPosition = sp;
      m.lastKeyError = own_.err;
    }
    m.valueError = std::max(m.valueError, a->valueError[l]);
  }
  if (m.diverged == 0) return std::nullopt;
  return m;
}

FindingDraft QkNormOrderEvidence::finding(const StepAnalysis& a, const QkNormOrderMatch& m,
                                          std::map<std::string, double> ev) {
  ev["key_error"] = m.firstKeyError;
  ev["value_error"] = m.valueError;
  ev["swapped_order_key_error"] = m.swappedError;
  ev["tolerance"] = m.tolerance;
  ev["own_reference_error"] = m.ownError;
  ev["records_compared"] = static_cast<double>(m.records);
  ev["records_diverged"] = static_cast<double>(m.diverged);
  ev["first_position"] = static_cast<double>(m.firstPosition);
  ev["last_position"] = static_cast<double>(m.lastPosition);
  ev["key_error_last_position"] = m.lastKeyError;
  ev["k_norm_weight_spread"] = m.weightSpread;
  const std::string layer = std::to_string(m.layer);
  std::string ex =
      "layer " + layer + "'s new keys differ from the reference (key error " +
      numberText(m.firstKeyError) + " at position " + std::to_string(m.firstPosition) + ", " +
      numberText(m.lastKeyError) + " at position " + std::to_string(m.lastPosition) +
      ") while its values are exact (value error " + numberText(m.valueError) +
      "): every one of its " + std::to_string(m.records) +
      " key record(s) equals the reference key with the per-head k_norm applied after RoPE "
      "instead of before it (max diff " + numberText(m.swappedError) + ", tolerance " +
      numberText(m.tolerance) + "), re-derived from the checkpoint's k_norm weight (its "
      "entries span a factor " + numberText(m.weightSpread) + ")";
  if (m.positionZeroExact)
    ex += "; the key at position 0 is right, as it must be: RoPE is the identity there and both "
          "orders agree";
  ex += ". The queries are not recorded; a path that swaps the order for the keys swaps it for "
        "q_norm too, as one fused norm + rotary kernel does";
  if (a.logitsCompared) ex += "; logits moved by " + numberText(a.logitError);
  return FindingDraft(finding::QkNormOrder)
      .at(*a.step)
      .layer(a.firstBadLayer)
      .position(a.firstBadStreamIndex)
      .confidence(0.95)
      .explanation(ex)
      .evidence(ev);
}

}  // namespace kvscope::detail
