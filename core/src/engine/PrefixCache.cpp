#include "engine/PrefixCache.hpp"

#include <algorithm>
#include <iterator>

namespace kvscope::detail {

int64_t PrefixCache::sharedBlocks(const std::vector<int64_t>& prompt,
                                  const std::vector<int64_t>& other, bool partial) const {
  // Leave the prompt's last token to compute: the step needs its logits row.
  const auto limit = static_cast<int64_t>(std::min(prompt.size() - 1, other.size()));
  int64_t n = 0;
  while (n + block_ <= limit) {
    const int64_t compared = partial ? block_ - 1 : block_;
    if (!std::equal(prompt.begin() + n, prompt.begin() + n + compared, other.begin() + n)) break;
    n += block_;
  }
  return n;
}

PrefixHit PrefixCache::reuse(RequestState& r, KvCache& cache, uint64_t version,
                             const FaultPlan& faults,
                             const std::function<void(RequestState&, int64_t)>& computeRows) {
  PrefixHit hit;
  const std::vector<int64_t>& prompt = r.spec.promptIds;
  if (prompt.size() < 2) return hit;
  const bool partial = faults.prefixPartialMatch(r.id);
  const Entry* best = nullptr;
  for (const Entry& e : entries_) {
    if (e.version != version || e.slot == r.slot) continue;
    const int64_t n = sharedBlocks(prompt, e.prompt, partial);
    if (n > hit.length) {
      hit.length = n;
      best = &e;
    }
  }
  if (!best) return hit;
  // Recurrent layers: the longest hit the source holds states after.
  bool recurrent = false;
  for (int64_t l = 0; l < cache.layers(); ++l) recurrent = recurrent || cache.isRecurrent(l);
  if (recurrent) {
    const auto after = best->states.upper_bound(hit.length);
    hit.length = after == best->states.begin() ? 0 : std::prev(after)->first;
    if (hit.length == 0) return {};
    hit.states.insert(best->states.begin(), best->states.upper_bound(hit.length));
  }
  hit.source = best->request;
  // prefix_reuse fired when the lookup handed over more than a full comparison would have.
  if (partial && sharedBlocks(prompt, best->prompt, false) < hit.length)
    faults.noteFired("prefix_reuse", r.id, 0, faults.prefixReuseLayer(r.id));
  uint64_t chain = 1469598103934665603ull;  // FNV-1a over the blocks' tokens, chained
  for (int64_t b = 0; b < hit.length / block_; ++b) {
    for (int64_t j = b * block_; j < (b + 1) * block_; ++j) {
      chain ^= static_cast<uint64_t>(best->prompt[static_cast<size_t>(j)]);
      chain *= 1099511628211ull;
    }
    hit.blocks.push_back(static_cast<int64_t>(chain >> 12));  // fits a JSON double exactly
  }
  // A fault on one layer: the other layers' rows are right (computed), that layer's the block's.
  const int64_t onlyLayer = partial ? faults.prefixReuseLayer(r.id) : -1;
  if (onlyLayer >= 0) computeRows(r, hit.length);
  std::fill(r.lengths.begin(), r.lengths.end(), hit.length);
  for (int64_t l = 0; l < cache.layers(); ++l) {
    if (onlyLayer >= 0 && l != onlyLayer) continue;
    if (!cache.isRecurrent(l)) {
      cache.write(l, r.slot, 0, cache.copyKeys(l, best->slot, 0, hit.length),
                  cache.copyValues(l, best->slot, 0, hit.length));
    } else if (faults.dropsPrefixState(r.id, l)) {
      r.lengths[static_cast<size_t>(l)] = 0;  // prefix_state: the layer starts from a fresh state
      faults.noteFired("prefix_state", r.id, r.step, l);
    } else {
      const RecurrentState& st = hit.states.at(hit.length).at(l);
      cache.setRecurrentState(l, r.slot, st.conv.select(0, 0), st.state.select(0, 0));
    }
  }
  r.valid.assign(static_cast<size_t>(hit.length), 1);
  r.consumed.assign(prompt.begin(), prompt.begin() + hit.length);
  r.nextPosition = hit.length;
  r.promptFed = hit.length;
  return hit;
}

void PrefixCache::add(const RequestState& r, uint64_t version, PrefixStates states) {
  forgetSlot(r.slot);
  entries_.push_back({r.id, r.slot, r.spec.promptIds, version, std::move(states)});
}

void PrefixCache::forgetSlot(int64_t slot) {
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [&](const Entry& e) { return e.slot == slot; }),
                 entries_.end());
}

}  // namespace kvscope::detail
