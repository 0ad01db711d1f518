// Trace+trace mode, sampled runs: when the audited run and the reference run of the same
// requests choose different tokens, is it the random generator? `rng_order` needs evidence:
// the same seed, logits equal within tolerance at the first differing step, and two
// different chosen tokens that are both eligible under the policy. Works for any engine's
// generator: nothing is replayed.
#pragma once

#include <map>
#include <vector>

#include "audit/StepAnalysis.hpp"
#include "kvscope/AuditReport.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

/// Adds check lines to `stage` (the policy stage) and `rng_order` findings.
void checkRngAgainstReference(const Trace& reference, const Trace& cached,
                              const std::map<int64_t, std::vector<StepAnalysis>>& analyses,
                              StageResult& stage, std::vector<Finding>& findings);

}  // namespace kvscope::detail
