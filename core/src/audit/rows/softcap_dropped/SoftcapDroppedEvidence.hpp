// Evidence for an attention soft-cap dropped by the cached path (softcap_dropped): on a
// checkpoint with attn_logit_softcapping (Gemma 2), a layer computes its scores without
// tanh(s / cap) * cap. Its own K/V records are exact (they are computed before attention);
// what it hands on is not, so the records of the layer after it differ, keys and values both,
// from position 1 on (a query with one key attends to it with weight 1 whatever the cap), or
// only the logits when it is the last layer. The audit re-derives the run: an uncached pass
// with the soft-cap dropped on that layer (or on it and every layer after it) from the onset
// on must reproduce every record and logits row of the request from there.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "audit/FindingBuilder.hpp"
#include "audit/ReferenceSet.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/Trace.hpp"

namespace kvscope::detail {

struct SoftcapDroppedMatch {
  int64_t layer = -1;            // the first layer whose attention ran without the cap
  bool layersAbove = false;      // the cap dropped on it and on every layer after it
  int64_t onset = 0;             // stream index from which the queries ran uncapped
  int64_t recordLayer = -1;      // the first layer whose records differ (-1: logits only)
  int64_t records = 0;           // records compared with the hypothesis
  int64_t logitRows = 0;         // logits rows compared with it
  double hypothesisError = 0;    // max |record - hypothesis|
  double hypothesisLogitError = 0;
  double tolerance = 0;          // the largest record tolerance among them
  double layerError = 0;         // max K/V error of `layer` itself at the onset step
  double keyError = 0, valueError = 0;  // of recordLayer at the onset step
  int64_t firstPosition = -1;    // the first stream index whose records (or logits) differ
  bool positionZeroExact = false;
  double logitError = 0;         // the onset step's logits against the reference
};

class SoftcapDroppedEvidence {
 public:
  SoftcapDroppedEvidence(const Trace& trace, ReferenceSet& refs, const Tolerance& tol)
      : trace_(trace), refs_(refs), tol_(tol) {}
  /// `steps`: the request's analyses from its first divergence on (the first one first).
  /// `logitsOnly`: every record of the first one matches and its logits do not.
  std::optional<SoftcapDroppedMatch> explain(const std::vector<const StepAnalysis*>& steps,
                                             bool logitsOnly) const;
  static FindingDraft finding(const StepAnalysis& a, const SoftcapDroppedMatch& m, double cap,
                              std::map<std::string, double> evidence);

 private:
  /// Compares the steps' records and logits with an uncached pass over `stream` whose
  /// layers `from`.. (`above`: up to the last) drop the cap from stream index `onset` on.
  bool test(const std::vector<const StepAnalysis*>& steps, const std::vector<int64_t>& stream,
            int64_t from, bool above, SoftcapDroppedMatch& m) const;

  const Trace& trace_;
  ReferenceSet& refs_;
  const Tolerance& tol_;
};

}  // namespace kvscope::detail
