// Where the cached engine keeps a recurrent layer's state inside a forward (beyond the state
// after it): after each draft of a speculative step, to roll rejected drafts back, and after each
// whole block of a prompt the prefix cache registers, to hand a prefix's state over.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/CachedAttention.hpp"
#include "engine/PrefixCache.hpp"
#include "engine/RequestState.hpp"

namespace kvscope::detail {

/// A one-row forward of `r` feeding `width` entries, `drafts` of them speculative: the fed
/// lengths after which recurrent layers keep their state. After the fed token and each draft
/// but the last (the rollback's candidates); a prefill that completes the prompt with a prefix
/// cache of `prefixBlock` tokens (0: none) also after each whole block it computes.
std::vector<int64_t> stateCheckpoints(const RequestState& r, int64_t width, size_t drafts, int64_t prefixBlock);

/// The recurrent states after each whole block of `r`'s prompt (its prefill of `width` entries
/// just done), for its prefix-cache entry: those within `hit` from the hit's source, the rest as
/// `attention` kept them (nullptr: none).
PrefixStates prefixStates(const RequestState& r, int64_t width, const PrefixHit& hit,
                          const CachedAttention* attention);

}  // namespace kvscope::detail
