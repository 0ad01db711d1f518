// Stage 5 (policy, logits held fixed) and stage 6 (stopping) of the audit.
#pragma once

#include <vector>

#include "kvscope/AuditReport.hpp"
#include "audit/rows/FailureRow.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

/// Re-applies each request's recorded policy to its recorded logits (no model needed):
/// parameter domain, kept probabilities sum to 1, chosen token eligible, tie rule, RNG
/// replay from the seed (shifted draw counts and re-seeding are recognised).
/// The recorded (cached) logits are used as they are, so whatever this stage finds is a
/// policy finding (tie_rule, rng_order), never a cache one.
/// In trace+trace mode (`reference`) the rows also compare the runs' sampled tokens.
StageResult policyStage(const Trace& trace, const Trace* reference,
                        const RequestAnalyses& analyses, std::vector<Finding>& findings);

/// EOS handling, max new tokens and the context limit: why each request ended and whether
/// that was right.
StageResult stoppingStage(const Trace& trace, std::vector<Finding>& findings, std::string& summary);

}  // namespace kvscope::detail
