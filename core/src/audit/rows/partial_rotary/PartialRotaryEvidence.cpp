#include "audit/rows/partial_rotary/PartialRotaryEvidence.hpp"

#include "audit/NumberText.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "model/RotaryEmbedding.hpp"

namespace kvscope::detail {

bool PartialRotaryEvidence::applies() const {
  // LongRoPE's factors are one per rotary pair: there is no whole-head frequency set to test.
  return config_.usesRope() && config_.keyRecordsAreRotatedHeads() &&
         RotaryEmbedding::rotaryDim(config_) < config_.headDim &&
         config_.rope.type != "longrope";
}

std::string PartialRotaryEvidence::hypothesisText(int h, int64_t r, int64_t d) {
  const std::string rs = std::to_string(r), ds = std::to_string(d), hs = std::to_string(d / 2);
  if (h == 1)
    return "all " + ds + " features rotated, frequencies theta^(-2i/" + ds +
           ") over pairs (i, i + " + hs + "): partial_rotary_factor ignored";
  if (h == 2)
    return "the first " + std::to_string(r / 2) + " of " + hs + " pairs (i, i + " + hs +
           ") rotated with the head width's frequencies theta^(-2i/" + ds + ")";
  return "the rotary frequencies theta^(-2i/" + rs + ") zero-padded to " + hs +
         " pairs and applied over the whole head: pairs (i, i + " + hs + ") where transformers "
         "pairs (i, i + " + std::to_string(r / 2) + ")";
}

std::optional<PartialRotaryMatch> PartialRotaryEvidence::explain(
    const std::vector<const StepAnalysis*>& steps, const RequestReference& own) const {
  if (steps.empty() || !applies()) return std::nullopt;
  const int64_t layer = steps.front()->firstBadLayer;
  if (layer < 0 || !config_.ropeOn(layer)) return std::nullopt;
  const int64_t d = config_.headDim;
  const RotaryEmbedding rope = RotaryEmbedding::forLayer(config_, layer);
  const int64_t r = RotaryEmbedding::rotaryDim(config_.ropeFor(layer), d);
  const RopeConfig& rc = config_.ropeFor(layer);
  // The three frequency sets over d/2 pairs.
  const torch::Tensor headWidth = RotaryEmbedding::scaled(rc, RotaryEmbedding::defaultInvFreq(rc.theta, d));
  const torch::Tensor firstPairs = torch::cat({headWidth.narrow(0, 0, r / 2), torch::zeros({(d - r) / 2})});
  const torch::Tensor padded = torch::cat({rope.baseInvFreq(), torch::zeros({(d - r) / 2})});
  const RotaryEmbedding whole = RotaryEmbedding::wholeHead(config_, layer);
  for (int h = 1; h <= 3; ++h) {
    auto otherwise = [&](const torch::Tensor& refCols, const torch::Tensor& p) {
      auto [cos, sin] = rope.cosSin(p.view({1, -1}));
      const auto plain = RotaryEmbedding::apply(refCols, cos, -sin);
      auto [wc, ws] = h == 1 ? whole.cosSin(p.view({1, -1}))
                             : RotaryEmbedding::rotation(p.view({1, -1}), h == 2 ? firstPairs : padded);
      return RotaryEmbedding::apply(plain, wc, ws);
    };
    if (auto keys = matchKeyRecords(steps, own, tol_, d, otherwise)) return PartialRotaryMatch{*keys, h, r, d};
  }
  return std::nullopt;
}

FindingDraft PartialRotaryEvidence::finding(const StepAnalysis& a, const PartialRotaryMatch& m,
                                            std::map<std::string, double> ev) {
  addKeyRecordEvidence(ev, m.keys, "whole_head_key_error");
  ev["hypothesis"] = static_cast<double>(m.hypothesis);
  ev["rotary_dim"] = static_cast<double>(m.rotaryDim);
  ev["head_dim"] = static_cast<double>(m.headDim);
  std::string ex =
      "layer " + std::to_string(m.keys.layer) + " rotates the first " + std::to_string(m.rotaryDim) +
      " of each head's " + std::to_string(m.headDim) + " features by the checkpoint "
      "(partial_rotary_factor), but its new keys differ from the reference (key error " +
      numberText(m.keys.firstKeyError) + " at position " + std::to_string(m.keys.firstPosition) +
      ", " + numberText(m.keys.lastKeyError) + " at position " + std::to_string(m.keys.lastPosition) +
      ") while its values are exact (value error " + numberText(m.keys.valueError) +
      "): every one of its " + std::to_string(m.keys.records) +
      " key record(s) equals the reference key rotated over the whole head instead (" +
      hypothesisText(m.hypothesis, m.rotaryDim, m.headDim) + "; max diff " +
      numberText(m.keys.hypothesisError) + ", tolerance " + numberText(m.keys.tolerance) + ")";
  return keyRecordFinding(finding::PartialRotary, a, m.keys, std::move(ex), "every rotation is the identity there", std::move(ev));
}

}  // namespace kvscope::detail
