// Stage 1's last check, once the requests were walked: does the reference reproduce the run
// from its very first records on? A checkpoint of the same shape with other weights (a
// sibling, a fine-tune; the trace names no fingerprint) passes every check stage 1 can make
// before the walk, and then differs everywhere: that is a wrong input, not a cache bug.
#pragma once

#include <optional>
#include <string>

#include "audit/FindingBuilder.hpp"
#include "audit/ReferenceSet.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "audit/rows/FailureRow.hpp"

namespace kvscope::detail {

/// The `reference` finding when these weights did not produce the trace.
struct FirstRecordsVerdict {
  FindingDraft finding;
  std::string check;    // stage 1's FAIL line
  std::string summary;  // stage 1's summary
};

/// What no cache bug can do: make layer 0's prefill record at position 0 differ in both K
/// and V (it depends on the first token, the position-0 rotation, which is the identity, and
/// the layer-0 weights; nothing cached) at the same time as every other layer-0 prefill
/// record and the first logits row. So it fires only when, for every request whose first
/// step can be checked (a prefill from position 0 with no reused prefix and no structural
/// evidence: a recorded position or stream error is a cache bug's), layer 0's K and V are
/// each more than kFar x their tolerance off at every position, position 0 included, the
/// request's first logits row too, and layer 0's record at position 0 equals no layer's and
/// no request's reference row at position 0 (wrong_layer and cross_request write such rows).
/// `referenceTrace`: trace+trace mode (the words name the reference trace).
std::optional<FirstRecordsVerdict> firstRecordsNotReproduced(const Trace& trace,
                                                             const RequestAnalyses& analyses,
                                                             ReferenceSet& refs,
                                                             const Tolerance& tol,
                                                             bool referenceTrace);

/// How far beyond tolerance "far" is (ratio of error to tolerance).
constexpr double kFirstRecordsFar = 10.0;

}  // namespace kvscope::detail
