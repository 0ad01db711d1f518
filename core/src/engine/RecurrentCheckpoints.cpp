#include "engine/RecurrentCheckpoints.hpp"

namespace kvscope::detail {

std::vector<int64_t> stateCheckpoints(const RequestState& r, int64_t width, size_t drafts, int64_t prefixBlock) {
  std::vector<int64_t> out;
  for (int64_t n = width - static_cast<int64_t>(drafts); drafts > 0 && n < width; ++n) out.push_back(n);
  const auto prompt = static_cast<int64_t>(r.spec.promptIds.size());
  if (prefixBlock > 0 && r.promptFed + width == prompt)
    // Whole blocks ending before the prompt's last token (a hit leaves that one to compute).
    for (int64_t end = (r.promptFed / prefixBlock + 1) * prefixBlock; end <= prompt - 1; end += prefixBlock)
      out.push_back(end - r.promptFed);
  return out;
}

PrefixStates prefixStates(const RequestState& r, int64_t width, const PrefixHit& hit,
                          const CachedAttention* attention) {
  PrefixStates out = hit.states;
  const int64_t fedFrom = r.promptFed - width;
  if (attention)
    for (const auto& [at, state] : attention->keptStates()) out[fedFrom + at.second][at.first] = state;
  return out;
}

}  // namespace kvscope::detail
