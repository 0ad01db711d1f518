// Maps the measured step analyses of every request onto failure-matrix findings with
// evidence. Structural evidence (fed stream, positions, cache lengths, rewritten rows,
// weights versions) is reported wherever it occurs; value evidence (where a mismatching
// record's values really came from) is searched at each request's first divergence.
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
  void structural(int64_t request, const StepAnalysis& a, FindingBuilder& f);
  void rewritten(int64_t request, const StepAnalysis& a, FindingBuilder& f);
  void speculativeRollback(int64_t request, const StepAnalysis& a, FindingBuilder& f);
  void valueBased(int64_t request, const StepAnalysis& a, FindingBuilder& f);
  /// chunk_position at `a`, a chunk after the first of a chunked prefill, from its recorded
  /// positions or (`fromValues`) its records; true when `a` is explained (a later chunk of a
  /// prefill already found wrong is its consequence).
  bool chunkPosition(int64_t request, const StepAnalysis& a, FindingBuilder& f, bool fromValues);
  void driftAndTies(int64_t request, const StepAnalysis& a, FindingBuilder& f);
  /// Another request whose steps ran between this request's previous step and `a`.
  int64_t interleavedRequest(int64_t request, const StepAnalysis& a) const;
  int64_t slotSharer(int64_t request, int64_t slot, int64_t upToTick) const;

  const Trace& trace_;
  ReferenceSet& refs_;
  const Tolerance& tol_;
  const std::map<int64_t, std::vector<StepAnalysis>>& analyses_;
  const std::map<int64_t, const RequestReference*>& references_;
  int64_t slidingWindow_;
  std::set<int64_t> noDrift_;
  std::map<int64_t, int64_t> previousTick_;  // request -> tick of the step before the current one
};

}  // namespace kvscope::detail
