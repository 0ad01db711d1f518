// The built-in engine's prefix cache (vLLM's automatic prefix caching in miniature): each
// request prefilled alone registers its prompt in blocks of B tokens; a later request whose
// prompt begins with the same whole blocks takes those cache rows (copied from the earlier
// request's slot) instead of computing them, and computes the rest. The prefix_reuse fault
// matches a block on all but its last token (a block hash over too few tokens), so a block
// computed for another prompt is handed over. A model with recurrent layers hands over their
// state after the prefix too (vLLM's Mamba prefix caching keeps one per block): each entry
// holds the states after each of its whole blocks; the prefix_state fault leaves them unset.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "cache/KvCache.hpp"
#include "engine/FaultPlan.hpp"
#include "engine/RequestState.hpp"
#include "model/AttentionContext.hpp"

namespace kvscope::detail {

/// A model's recurrent states after some prompt tokens: stream length -> layer -> state
/// ([1, ...] tensors, as a one-row forward keeps them).
using PrefixStates = std::map<int64_t, std::map<int64_t, RecurrentState>>;

struct PrefixHit {
  int64_t length = 0;           // cache entries taken (0: no hit)
  int64_t source = -1;          // the request they were computed for
  std::vector<int64_t> blocks;  // the blocks' ids (chained hashes of their tokens)
  PrefixStates states;          // the source's recurrent states within the hit
};

class PrefixCache {
 public:
  explicit PrefixCache(int64_t blockSize) : block_(blockSize) {}
  /// Starts `r`'s cache (empty, about to prefill alone) with the longest run of whole blocks
  /// of its prompt, its last token left to compute, that a registered prompt of weights
  /// `version` begins with: rows copied per layer, lengths, stream and next position set.
  /// `computeRows(r, n)` prefills `r`'s first n prompt tokens normally (the prefix_reuse
  /// fault with a layer: the other layers' rows are right, that layer's are the wrong block's).
  PrefixHit reuse(RequestState& r, KvCache& cache, uint64_t version, const FaultPlan& faults,
                  const std::function<void(RequestState&, int64_t)>& computeRows);
  /// `r`'s prompt rows are in its slot (prefilled alone, unpadded) under weights `version`;
  /// `states`: its recurrent layers' states after each whole block (none without such layers).
  void add(const RequestState& r, uint64_t version, PrefixStates states = {});
  int64_t blockSize() const { return block_; }
  /// Drops every entry held in `slot` (its rows are about to be overwritten or cleared).
  void forgetSlot(int64_t slot);

 private:
  struct Entry {
    int64_t request, slot;
    std::vector<int64_t> prompt;
    uint64_t version;
    PrefixStates states;
  };
  /// Tokens of whole blocks `prompt` and `other` share from the start (`partial`: a block's
  /// last token is not compared).
  int64_t sharedBlocks(const std::vector<int64_t>& prompt, const std::vector<int64_t>& other,
                       bool partial) const;
  int64_t block_;
  std::vector<Entry> entries_;
};

}  // namespace kvscope::detail
