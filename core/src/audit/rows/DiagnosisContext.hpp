// What the diagnosis walk hands each row: the trace, the references, the tolerance, every
// request's step analyses, the findings so far, and the evidence several rows ask about
// (computed once per step: the signature search, the rewritten rows' origin).
#pragma once

#include <map>
#include <optional>
#include <set>

#include "audit/FindingBuilder.hpp"
#include "audit/ReferenceSet.hpp"
#include "audit/RewriteOrigin.hpp"
#include "audit/SignatureSearch.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "audit/rows/FailureRow.hpp"

namespace kvscope::detail {

class DiagnosisContext {
 public:
  DiagnosisContext(const Trace& trace, ReferenceSet& refs, const Tolerance& tol,
                   const RequestAnalyses& analyses,
                   const std::map<int64_t, const RequestReference*>& references,
                   int64_t slidingWindow, std::set<int64_t> noDrift, FindingBuilder& findings)
      : trace(trace), refs(refs), tol(tol), analyses(analyses), references(references),
        slidingWindow(slidingWindow), noDrift(std::move(noDrift)), findings_(findings) {}

  const Trace& trace;
  ReferenceSet& refs;
  const Tolerance& tol;
  const RequestAnalyses& analyses;
  const std::map<int64_t, const RequestReference*>& references;  // request -> latest reference
  const int64_t slidingWindow;   // the model's sliding window (0: none)
  const std::set<int64_t> noDrift;  // requests whose near-tie flips another finding explains

  /// Adds a finding about step `a`, linked to its root when a row that declares it among its
  /// consequences already has a finding for the request and explains it (RowSpec::causes).
  void add(const FindingDraft& draft, const StepAnalysis& a);
  /// Request `request`'s analyses from `a` on (a first): what a row re-deriving the run from
  /// its first divergence compares.
  std::vector<const StepAnalysis*> stepsFrom(int64_t request, const StepAnalysis& a) const;
  bool hasFor(const char* id, int64_t request) const { return findings_.hasFor(id, request); }

  /// The signature search at `a`'s first bad record (asked by several rows, run once).
  const std::optional<SignatureMatch>& signature(int64_t request, const StepAnalysis& a,
                                                 const RequestReference& own);
  /// Whose rows the rewritten rows of `a` are (nullopt: no own reference, or no match).
  const std::optional<RewriteMatch>& rewriteOrigin(int64_t request, const StepAnalysis& a);

  /// A row that explains a step's wrong positions claims them, so that no other row reports
  /// the same positions again (chunk_position before position).
  void claimPositions(const StepAnalysis& a) { positionsClaimed_.insert(&a); }
  bool positionsClaimed(const StepAnalysis& a) const { return positionsClaimed_.count(&a) > 0; }

  /// The request whose stream holds the tokens `a` fed at their stream indices (-1: none).
  int64_t streamOwner(int64_t request, const StepAnalysis& a) const;
  /// Another request whose steps ran between this request's previous step and `a`.
  int64_t interleavedRequest(int64_t request, const StepAnalysis& a) const;
  /// Another request that used cache row `slot` up to `upToTick`.
  int64_t slotSharer(int64_t request, int64_t slot, int64_t upToTick) const;
  /// The walk moves on: `a` was the request's latest step.
  void stepDone(int64_t request, const StepAnalysis& a) { previousTick_[request] = a.step->tick; }
  void startRequest(int64_t request) { previousTick_.erase(request); }

 private:
  FindingBuilder& findings_;
  std::map<int64_t, int64_t> previousTick_;  // request -> tick of the step before the current
  std::map<const StepAnalysis*, std::optional<SignatureMatch>> signatures_;
  std::map<const StepAnalysis*, std::optional<RewriteMatch>> rewrites_;
  std::set<const StepAnalysis*> positionsClaimed_;
};

}  // namespace kvscope::detail
