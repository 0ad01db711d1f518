// What the re-deriving rows share (softcap_dropped, sink_dropped, chunk_mask): the steps of a
// request a hypothesis must reproduce (from its first divergence, with the same weights, until
// something structural happens), and whether an uncached pass under the hypothesis reproduces
// every K/V record and logits row of them within the audit's tolerances.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <optional>
#include <vector>

#include "audit/ReferenceSet.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

struct HypothesisSteps {
  std::vector<const StepAnalysis*> compared;  // the steps to reproduce, the first divergence first
  std::vector<int64_t> stream;                // the request's tokens up to the last one they feed
  std::vector<int64_t> positions;             // their positions in an uncached pass: 0, 1, ...
  int64_t onset = -1;                         // the first stream index the first step feeds
};

/// The steps of `steps` (a request's analyses from its first divergence on) a hypothesis pass
/// must reproduce; nullopt when the request or its stream cannot be found.
std::optional<HypothesisSteps> hypothesisSteps(const Trace& trace, const std::vector<const StepAnalysis*>& steps);

struct HypothesisFit {
  int64_t records = 0;       // records compared
  int64_t logitRows = 0;     // logits rows compared
  double error = 0;          // max |record - hypothesis|
  double logitError = 0;     // max |logits - hypothesis|
  double tolerance = 0;      // the largest record tolerance among them
};

/// The fit of `run` (an uncached pass over the steps' stream) to every record and logits row
/// of `steps`; nullopt when one lies beyond its tolerance or nothing was compared.
std::optional<HypothesisFit> fitHypothesis(const Trace& trace, const Tolerance& tol,
                                           const std::vector<const StepAnalysis*>& steps, const ReferenceRun& run);

/// An uncached pass over `h`'s stream under `change`, fitted to its steps; nullopt when the
/// pass cannot be computed or a record lies beyond its tolerance.
std::optional<HypothesisFit> testHypothesis(ReferenceSet& refs, const Trace& trace, const Tolerance& tol,
                                            const HypothesisSteps& h, const PassHypothesis& change);

/// "all N record(s) (max diff E, tolerance T) and M logits row(s) (max diff L)", for a
/// finding's sentence about the pass that reproduced them.
std::string fitText(const HypothesisFit& fit);

/// The fit's evidence: hypothesis_error, hypothesis_logit_error, tolerance, records_compared,
/// logit_rows_compared.
void addFitEvidence(std::map<std::string, double>& ev, const HypothesisFit& fit);

}  // namespace kvscope::detail
