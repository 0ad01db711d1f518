// The window_wrap finding (docs/audit.md): a ring-buffer window cache whose slot map, after
// a step, lost a position the next query needs (or holds one never fed, or contents its map
// does not describe), with where that happened relative to the ring's first wrap and where
// the numbers first diverge.
#pragma once

#include <vector>

#include "audit/FindingBuilder.hpp"
#include "audit/StepAnalysis.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

/// The finding for `onset` (its ringLayer >= 0), one of `steps`, the request's analyses.
FindingDraft windowWrapFinding(const Trace& trace, const StepAnalysis& onset,
                               const std::vector<StepAnalysis>& steps);

}  // namespace kvscope::detail
