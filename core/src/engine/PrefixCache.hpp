// The built-in engine's prefix cache (vLLM's automatic prefix caching in miniature): each
// request prefilled alone registers its prompt in blocks of B tokens; a later request whose
// prompt begins with the same whole blocks takes those cache rows (copied from the earlier
// request's slot) instead of computing them, and computes the rest. The prefix_reuse fault
// matches a block on all but its last token (a block hash over too few tokens), so a block
// computed for another prompt is handed over.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "cache/KvCache.hpp"
#include "engine/FaultPlan.hpp"
#include "engine/RequestState.hpp"

namespace kvscope::detail {

struct PrefixHit {
  int64_t length = 0;           // cache entries taken (0: no hit)
  int64_t source = -1;          // the request they were computed for
  std::vector<int64_t> blocks;  // the blocks' ids (chained hashes of their tokens)
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
  /// `r`'s prompt rows are in its slot (prefilled alone, unpadded) under weights `version`.
  void add(const RequestState& r, uint64_t version);
  /// Drops every entry held in `slot` (its rows are about to be overwritten or cleared).
  void forgetSlot(int64_t slot);

 private:
  struct Entry {
    int64_t request, slot;
    std::vector<int64_t> prompt;
    uint64_t version;
  };
  /// Tokens of whole blocks `prompt` and `other` share from the start (`partial`: a block's
  /// last token is not compared).
  int64_t sharedBlocks(const std::vector<int64_t>& prompt, const std::vector<int64_t>& other,
                       bool partial) const;
  int64_t block_;
  std::vector<Entry> entries_;
};

}  // namespace kvscope::detail
