// The diagnosis walk: maps the measured step analyses of every request onto failure-matrix
// findings by asking the rows (rows/RowRegistry.cpp) in their order. Structural evidence is
// reported wherever it occurs; a request's first value divergence that no structural
// evidence explains goes to the first row that explains it. The walk knows no row by name.
#pragma once

#include <map>
#include <set>
#include <vector>

#include "audit/FindingBuilder.hpp"
#include "audit/ReferenceSet.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

class DiagnosisContext;

class Diagnosis {
 public:
  Diagnosis(const Trace& trace, ReferenceSet& refs, const Tolerance& tol,
            const std::map<int64_t, std::vector<StepAnalysis>>& analyses,
            const std::map<int64_t, const RequestReference*>& references, int64_t slidingWindow)
      : trace_(trace), refs_(refs), tol_(tol), analyses_(analyses), references_(references),
        slidingWindow_(slidingWindow) {}
  void run(FindingBuilder& findings);
  /// Requests whose near-tie flips another finding explains (batch_variance): no drift.
  void noDriftFor(std::set<int64_t> requests) { noDrift_ = std::move(requests); }

 private:
  /// The request's first value divergence at `a`: the first row that explains it.
  void explainDivergence(DiagnosisContext& ctx, int64_t request, const StepAnalysis& a);

  const Trace& trace_;
  ReferenceSet& refs_;
  const Tolerance& tol_;
  const std::map<int64_t, std::vector<StepAnalysis>>& analyses_;
  const std::map<int64_t, const RequestReference*>& references_;
  int64_t slidingWindow_;
  std::set<int64_t> noDrift_;
};

}  // namespace kvscope::detail
