#include "audit/rows/nope_layer_rope/NopeLayerRopeEvidence.hpp"

#include <algorithm>

#include "audit/ColumnDiff.hpp"
#include "audit/NumberText.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "model/RotaryEmbedding.hpp"
#include "model/TorchTapSink.hpp"

namespace kvscope::detail {

std::optional<NopeLayerRopeMatch> NopeLayerRopeEvidence::explain(
    const std::vector<const StepAnalysis*>& steps, const RequestReference& own) const {
  if (steps.empty() || !config_.usesRope() || config_.ropeLayers.empty()) return std::nullopt;
  if (std::find(config_.ropeLayers.begin(), config_.ropeLayers.end(), false) == config_.ropeLayers.end())
    return std::nullopt;  // no NoPE layer: no list to read inverted
  const StepAnalysis& first = *steps.front();
  if (first.firstBadLayer < 0) return std::nullopt;
  const auto l = static_cast<size_t>(first.firstBadLayer);
  if (l >= own.keys.size() || l >= first.keyError.size()) return std::nullopt;
  auto valuesExact = [&](const StepAnalysis& a) {
    return a.valueError.size() > l && a.valueError[l] <= a.valueTol[l];
  };
  if (!valuesExact(first) || first.keyError[l] <= first.keyTol[l]) return std::nullopt;
  const FloatTensor& refK = own.keys[l];
  const int64_t d = config_.headDim;
  if (refK.shape.size() != 3 || refK.shape[2] != d) return std::nullopt;
  const RotaryEmbedding rope(config_);
  const torch::Tensor ref = fromFloatTensor(refK);  // [h, T, d]

  NopeLayerRopeMatch m;
  m.layer = first.firstBadLayer;
  m.layerRotates = config_.ropeOn(m.layer);
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
    auto [cos, sin] = rope.cosSin(p.view({1, n}));
    const auto refCols = ref.index_select(1, p).unsqueeze(0);  // [1, h, n, d]
    // The reference with the layer's rotation toggled: undone where it rotates, done where
    // it does not.
    const auto toggled =
        RotaryEmbedding::apply(refCols, cos, m.layerRotates ? -sin : sin).squeeze(0).contiguous();
    const FloatTensor hyp = toFloatTensor(toggled);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = cols[static_cast<size_t>(i)], sp = pos[static_cast<size_t>(i)];
      const ColumnDiff mine = columnDiff(rec, c, refK, sp);
      const ColumnDiff alt = columnDiff(rec, c, hyp, i);
      const double t = tol_.forRecord(static_cast<int64_t>(l), sp, mine.mag);
      m.toggledError = std::max(m.toggledError, alt.err);
      m.tolerance = std::max(m.tolerance, t);
      m.ownError = std::max(m.ownError, mine.err);
      ++m.records;
      if (alt.err > t) return std::nullopt;  // one record the toggled rotation does not give
      if (mine.err <= t) {
        if (sp == 0) m.positionZeroExact = true;
        continue;
      }
      if (m.diverged++ == 0) {
        m.firstPosition = sp;
        m.firstKeyError = mine.err;
      }
      m.lastPosition = sp;
      m.lastKeyError = mine.err;
    }
    m.valueError = std::max(m.valueError, a->valueError[l]);
  }
  if (m.diverged == 0) return std::nullopt;
  return m;
}

FindingDraft NopeLayerRopeEvidence::finding(const StepAnalysis& a, const NopeLayerRopeMatch& m,
                                            std::map<std::string, double> ev) {
  ev["key_error"] = m.firstKeyError;
  ev["value_error"] = m.valueError;
  ev["toggled_rotation_key_error"] = m.toggledError;
  ev["tolerance"] = m.tolerance;
  ev["own_reference_error"] = m.ownError;
  ev["records_compared"] = static_cast<double>(m.records);
  ev["records_diverged"] = static_cast<double>(m.diverged);
  ev["first_position"] = static_cast<double>(m.firstPosition);
  ev["last_position"] = static_cast<double>(m.lastPosition);
  ev["key_error_last_position"] = m.lastKeyError;
  ev["layer_rotates"] = m.layerRotates ? 1.0 : 0.0;
  const std::string layer = std::to_string(m.layer);
  std::string ex =
      "layer " + layer + " is a " + (m.layerRotates ? "rotary" : "NoPE") +
      " layer by the checkpoint's no_rope_layers, but its new keys differ from the reference "
      "(key error " + numberText(m.firstKeyError) + " at position " +
      std::to_string(m.firstPosition) + ", " + numberText(m.lastKeyError) + " at position " +
      std::to_string(m.lastPosition) + ") while its values are exact (value error " +
      numberText(m.valueError) + "): every one of its " + std::to_string(m.records) +
      " key record(s) equals the reference key " +
      (m.layerRotates ? "left unrotated" : "rotated to its position") + " (max diff " +
      numberText(m.toggledError) + ", tolerance " + numberText(m.tolerance) +
      "), as a path that reads no_rope_layers inverted (1 = rotary, 0 = NoPE) computes it";
  if (m.positionZeroExact)
    ex += "; the key at position 0 is right, as it must be: the rotation is the identity there";
  if (a.logitsCompared) ex += "; logits moved by " + numberText(a.logitError);
  return FindingDraft(finding::NopeLayerRope)
      .at(*a.step)
      .layer(a.firstBadLayer)
      .position(a.firstBadStreamIndex)
      .confidence(0.95)
      .explanation(ex)
      .evidence(ev);
}

}  // namespace kvscope::detail
