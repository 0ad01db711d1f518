// The check the attention-path rows share (softcap_dropped, sink_dropped): a layer's
// attention ran without one of the checkpoint's features (the soft-cap, the sinks) while its
// own K/V records are exact (they are computed before attention). What it hands on is not, so
// the records of the layer after it differ, keys and values both, or only the logits when it
// is the last layer. The audit re-derives the run: an uncached pass without the feature on
// that layer (or on it and every layer after it) from the onset on must reproduce every
// record and logits row of the request from there.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <optional>
#include <vector>

#include "audit/FindingBuilder.hpp"
#include "audit/HypothesisFit.hpp"
#include "audit/ReferenceSet.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/Trace.hpp"
#include "model/AttentionFeature.hpp"

namespace kvscope::detail {

struct DroppedFeatureMatch {
  int64_t layer = -1;            // the first layer whose attention ran without the feature
  bool layersAbove = false;      // dropped on it and on every layer after it
  int64_t onset = 0;             // stream index from which the queries ran without it
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

/// How a row names its feature in the finding both rows build (droppedFeatureFinding).
struct DroppedFeatureWords {
  const char* id;            // the row's finding id
  std::string evidenceKey;   // "uncapped": evidence <key>_layer, <key>_layers_above,
                             // <key>_layer_record_error
  std::string verbOne, verbMany;  // "computes" / "compute" (one layer / several)
  std::string without;       // what the pass leaves out, after the verb
  std::string how;           // who computes it that way
  std::string positionZero;  // why position 0 is right, when it is ("" never)
};

/// The finding of a DroppedFeatureMatch: the symptom (which layer's records are exact, which
/// are not), the pass that reproduces them, and the evidence.
FindingDraft droppedFeatureFinding(const StepAnalysis& a, const DroppedFeatureMatch& m,
                                   const DroppedFeatureWords& w, std::map<std::string, double> ev);

class DroppedFeatureHypothesis {
 public:
  DroppedFeatureHypothesis(AttentionFeature feature, const Trace& trace, ReferenceSet& refs,
                           const Tolerance& tol)
      : feature_(feature), trace_(trace), refs_(refs), tol_(tol) {}
  /// `steps`: the request's analyses from its first divergence on (the first one first).
  /// `logitsOnly`: every record of the first one matches and its logits do not. Model mode
  /// only (the hypothesis is an uncached pass of the checkpoint).
  std::optional<DroppedFeatureMatch> explain(const std::vector<const StepAnalysis*>& steps,
                                             bool logitsOnly) const;

 private:
  /// Compares the steps' records and logits with an uncached pass over their stream whose
  /// layers `from`.. (`above`: up to the last) drop the feature from stream index `onset` on.
  bool test(const HypothesisSteps& h, int64_t from, bool above, DroppedFeatureMatch& m) const;

  AttentionFeature feature_;
  const Trace& trace_;
  ReferenceSet& refs_;
  const Tolerance& tol_;
};

}  // namespace kvscope::detail
