#include "kvscope/ExpertRouting.hpp"

namespace kvscope {

std::vector<int64_t> ExpertChoices::of(size_t token, int64_t layer) const {
  std::vector<int64_t> out;
  if (slots <= 0 || layer < 0 || layer >= layers) return out;
  const size_t first = (token * static_cast<size_t>(layers) + static_cast<size_t>(layer)) * static_cast<size_t>(slots);
  if (first + static_cast<size_t>(slots) > ids.size()) return out;
  for (int64_t k = 0; k < slots; ++k)
    if (ids[first + static_cast<size_t>(k)] >= 0) out.push_back(ids[first + static_cast<size_t>(k)]);
  return out;
}

double nearTieSlack(const std::vector<RoutingDecision>& routing, int64_t layer, int64_t position) {
  for (const auto& d : routing)
    if (d.followed && d.token == position && (layer < 0 || d.layer < layer)) return kNearTieSlack;
  return 1.0;
}

}  // namespace kvscope
