// The one rule for a mixture of experts' routing (model/ModelForward's moeBlock): each
// token's top-k experts from its router logits, a per-row expert count (the expert_routing
// fault), an engine's choices followed on near ties (kvscope/ExpertRouting.hpp), and the
// gating weights of whichever experts were taken.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "kvscope/ExpertRouting.hpp"
#include "kvscope/ModelConfig.hpp"

namespace kvscope::detail {

class ExpertRouter {
 public:
  /// `scoreBias` [E]: DeepSeek's e_score_correction_bias (SigmoidGroupLimited), else undefined.
  explicit ExpertRouter(const MoeConfig& moe, torch::Tensor scoreBias = {})
      : moe_(moe), scoreBias_(std::move(scoreBias)) {}

  /// The experts [N, K] (K = the largest of `perRow`; -1: no expert in that slot) of router
  /// logits [N, E] (float32) of a forward of `perRow.size()` batch rows: row b's tokens take
  /// their top perRow[b].
  torch::Tensor topExperts(const torch::Tensor& logits, const std::vector<int64_t>& perRow) const;
  /// A one-row pass: where `guide` knows the engine's experts for a token and they differ
  /// from `own` within the guide's margin, the engine's; otherwise `own`. Every difference
  /// is appended to `decisions`.
  torch::Tensor follow(int64_t layer, const torch::Tensor& logits, const torch::Tensor& own,
                       const ExpertGuide& guide, std::vector<RoutingDecision>& decisions) const;
  /// The gating weights [N, K] of `experts` (-1 slots weigh 0), as the family's routing
  /// computes them from `logits`: identical to the weights of its own top-k where they are.
  torch::Tensor weights(const torch::Tensor& logits, const torch::Tensor& experts) const;

 private:
  /// What top-k ranks for each token [N, E]: the softmax probabilities where the family takes
  /// the top-k of its softmax, DeepSeek's group-limited choice scores (-inf outside the chosen
  /// groups), else the logits.
  torch::Tensor rankScores(const torch::Tensor& logits) const;

  const MoeConfig& moe_;
  torch::Tensor scoreBias_;
};

}  // namespace kvscope::detail
