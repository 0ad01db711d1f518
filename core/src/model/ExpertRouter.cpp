#include "model/ExpertRouter.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvscope::detail {

// A pass without faults or guide picks exactly the experts the family's own rule picks.
torch::Tensor ExpertRouter::rankScores(const torch::Tensor& logits) const {
  using Routing = MoeConfig::Routing;
  if (moe_.routing == Routing::SoftmaxThenTopK) return torch::softmax(logits, -1);
  if (moe_.routing != Routing::SigmoidGroupLimited && moe_.routing != Routing::SoftmaxGroupLimited) return logits;
  // DeepSeek V3: sigmoid + score bias, a group scores the sum of its two best; V2: softmax, a
  // group scores its best. The experts of all but the topGroups best groups are out of the choice.
  const bool v3 = moe_.routing == Routing::SigmoidGroupLimited;
  torch::Tensor choice = v3 ? torch::sigmoid(logits) : torch::softmax(logits, -1);
  if (v3 && scoreBias_.defined()) choice = choice + scoreBias_.to(choice.scalar_type());
  const int64_t N = choice.size(0), G = moe_.groups, per = choice.size(1) / G;
  const auto grouped = choice.view({N, G, per});
  const auto groupScores = v3 ? std::get<0>(grouped.topk(2, -1)).sum(-1) : std::get<0>(grouped.max(-1));  // [N, G]
  const auto kept = std::get<1>(groupScores.topk(moe_.topGroups, -1));
  const auto mask = torch::zeros({N, G}, torch::kBool).scatter(1, kept, true).unsqueeze(-1).expand({N, G, per});
  return grouped.masked_fill(mask.logical_not(), -std::numeric_limits<float>::infinity()).reshape({N, -1});
}

torch::Tensor ExpertRouter::topExperts(const torch::Tensor& logits,
                                       const std::vector<int64_t>& perRow) const {
  const int64_t most = perRow.empty() ? moe_.topK : *std::max_element(perRow.begin(), perRow.end());
  torch::Tensor experts = std::get<1>(torch::topk(rankScores(logits), most, -1));
  const auto B = static_cast<int64_t>(perRow.size());
  if (B == 0) return experts;
  const int64_t s = logits.size(0) / B;
  for (int64_t b = 0; b < B; ++b)
    if (perRow[static_cast<size_t>(b)] < most)
      experts.narrow(0, b * s, s).narrow(1, perRow[static_cast<size_t>(b)], most - perRow[static_cast<size_t>(b)]).fill_(-1);
  return experts;
}

torch::Tensor ExpertRouter::follow(int64_t layer, const torch::Tensor& logits, const torch::Tensor& own,
                                   const ExpertGuide& guide, std::vector<RoutingDecision>& decisions) const {
  const auto scores = logits.contiguous();
  const int64_t N = scores.size(0), E = scores.size(1), K = own.size(1);
  const auto lg = scores.accessor<float, 2>();
  const auto ownAt = own.accessor<int64_t, 2>();
  torch::Tensor out;  // a copy only once some token takes the engine's experts
  for (int64_t n = 0; n < N; ++n) {
    const std::vector<int64_t> engine = guide.choices.of(static_cast<size_t>(n), layer);
    if (engine.empty()) continue;
    std::vector<int64_t> mine;
    for (int64_t k = 0; k < K; ++k)
      if (ownAt[n][k] >= 0) mine.push_back(ownAt[n][k]);
    std::vector<int64_t> a = engine, b = mine;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (a == b) continue;
    RoutingDecision d;
    d.layer = layer;
    d.token = n;
    d.engine = engine;
    d.reference = mine;
    double maxAbs = 0.0;
    for (int64_t e = 0; e < E; ++e) maxAbs = std::max(maxAbs, std::fabs(static_cast<double>(lg[n][e])));
    d.margin = guide.margin ? guide.margin(layer, n, maxAbs) : 0.0;
    const bool known = std::all_of(engine.begin(), engine.end(), [E](int64_t e) { return e < E; });
    if (!known || engine.size() != mine.size() || static_cast<int64_t>(engine.size()) > K) {
      d.gap = std::numeric_limits<double>::infinity();
    } else {
      double weakestOwn = std::numeric_limits<double>::infinity();
      for (int64_t e : mine) weakestOwn = std::min(weakestOwn, static_cast<double>(lg[n][e]));
      for (int64_t e : engine)
        if (!std::binary_search(b.begin(), b.end(), e))
          d.gap = std::max(d.gap, weakestOwn - static_cast<double>(lg[n][e]));
    }
    d.followed = d.gap <= d.margin;
    if (d.followed) {
      if (!out.defined()) out = own.clone();
      auto row = out.select(0, n);
      row.fill_(-1);
      for (size_t k = 0; k < engine.size(); ++k) row[static_cast<int64_t>(k)] = engine[k];
    }
    decisions.push_back(std::move(d));
  }
  return out.defined() ? out : own;
}

torch::Tensor ExpertRouter::weights(const torch::Tensor& logits, const torch::Tensor& experts) const {
  const auto taken = experts.ge(0);
  const auto index = experts.clamp_min(0);
  if (moe_.routing == MoeConfig::Routing::TopKThenSigmoid || moe_.routing == MoeConfig::Routing::SigmoidGroupLimited) {
    // Each chosen logit's own sigmoid; DeepSeek's renormalised and scaled.
    auto w = torch::sigmoid(logits.gather(1, index)).masked_fill(taken.logical_not(), 0.0);
    if (moe_.routing == MoeConfig::Routing::TopKThenSigmoid) return w;
    if (moe_.normTopK) w = w / (w.sum(-1, true) + 1e-20);
    return w * moe_.routedScale;
  }
  if (moe_.routing == MoeConfig::Routing::TopKThenSoftmax)
    return torch::softmax(logits.gather(1, index).masked_fill(taken.logical_not(),
                                                              -std::numeric_limits<float>::infinity()),
                          -1);
  auto w = torch::softmax(logits, -1).gather(1, index).masked_fill(taken.logical_not(), 0.0);
  if (moe_.normTopK) w = w / w.sum(-1, true);
  return moe_.routedScale == 1.0 ? w : w * moe_.routedScale;
}

}  // namespace kvscope::detail
