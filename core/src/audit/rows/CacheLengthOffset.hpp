// Positions taken from an inflated cache length: the rule the rows that leave extra rows in a
// cache (duplicate_append, speculative_rollback) use to claim a `position` finding as theirs.
#pragma once

#include <string>

#include "audit/StepAnalysis.hpp"
#include "kvscope/AuditReport.hpp"

namespace kvscope::detail {

/// True when `position`'s offset at `a` equals the extra cache entries (cache length minus
/// the real entries fed); then says so, naming `what` left them.
inline bool offsetEqualsExtraRows(const StepAnalysis& a, Finding& position,
                                  const std::string& what) {
  const int64_t excess = a.lengthBefore.empty() ? 0 : a.lengthBefore[0] - a.cacheRealBefore;
  if (excess <= 0 || a.positionOffset != excess) return false;
  position.explanation += "; the offset equals the " + std::to_string(excess) + " " + what +
                          " left: the engine takes positions from the cache length";
  position.evidence["extra_cache_entries"] = static_cast<double>(excess);
  return true;
}

}  // namespace kvscope::detail
