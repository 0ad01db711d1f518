// The prefix_reuse finding (docs/audit.md): a prefix-cache hit whose reused rows differ from
// the request's own reference, with where in the hit span they start to differ, and which
// other request's reference they equal there instead.
#pragma once

#include "audit/FindingBuilder.hpp"
#include "audit/ReferenceSet.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

/// The finding for request `request`'s hit at `a` (a.reusedBadLayer >= 0).
FindingDraft prefixReuseFinding(const Trace& trace, ReferenceSet& refs, const Tolerance& tol,
                                int64_t request, const StepAnalysis& a);

}  // namespace kvscope::detail
