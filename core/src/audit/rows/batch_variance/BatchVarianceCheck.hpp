// Trace+trace audits of requests that ran in a batch against a reference trace in which
// they ran alone (both cached runs): does a batched request reproduce its solo run bit for
// bit? Nothing in a batch is shared, so any difference, however small, comes from kernels
// whose reduction order depends on the batch (`batch_variance`, docs/audit.md).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "audit/FindingBuilder.hpp"
#include "audit/StepAnalysis.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

class BatchVarianceCheck {
 public:
  BatchVarianceCheck(const Trace& audited, const Trace& reference);

  /// For every request batched in the audited trace and alone in the reference: a
  /// `batch_variance` finding at its first step that is not bit-identical to the solo run,
  /// when no step of it diverged beyond tolerance. Returns the numerics stage's lines
  /// (ok / FAIL / not checked, one per such request).
  std::vector<std::string> run(const std::map<int64_t, std::vector<StepAnalysis>>& analyses,
                               FindingBuilder& findings);

  /// Requests given a batch_variance finding: their near-tie flips are its consequence,
  /// not precision drift against an uncached reference.
  const std::set<int64_t>& explained() const { return explained_; }

 private:
  std::string mateList(const std::vector<int64_t>& mates) const;

  const Trace& audited_;
  const Trace& reference_;
  std::set<int64_t> explained_;
};

}  // namespace kvscope::detail
