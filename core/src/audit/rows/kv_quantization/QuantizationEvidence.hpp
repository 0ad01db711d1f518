// Evidence for a quantised cache (trace field kv_cache): how many quantisation steps a
// record sits from its projection and how its magnitude compares (a wrong dequantisation
// scale multiplies every element of the row by the same factor).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "audit/FindingBuilder.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/AuditResult.hpp"

namespace kvscope::detail {

struct QuantizationEvidence {
  int64_t layer = -1;
  int64_t position = -1;  // stream position of the record
  double error = 0.0;     // max |record - projection| over the record's rows
  double step = 0.0;      // the record's quantisation step (KvQuantization::step)
  double ratio = 1.0;     // max|row| / max|projection row| of the row with that error
  double errorSteps() const { return step > 0 ? error / step : 0.0; }
};

/// Per_token_head caches: the largest |max|row| - max|reference row|| over the kv heads of
/// record column `c` (keys and values) against reference column `p` (tensors [h, t, d]).
double rowScaleGap(const FloatTensor& keys, const FloatTensor& values, int64_t c,
                   const FloatTensor& refKeys, const FloatTensor& refValues, int64_t p);

/// At `a`'s first mismatching record (none: nullopt), against the request's own reference.
std::optional<QuantizationEvidence> measureQuantization(const StepAnalysis& a,
                                                        const RequestReference& own,
                                                        const Tolerance& tol);

/// The kv_quantization finding for that record (the cache's declared type, the error in
/// steps, the scale the row's magnitude implies).
FindingDraft quantizationFinding(const StepAnalysis& a, const QuantizationEvidence& q,
                                 const Tolerance& tol, std::map<std::string, double> evidence);

/// The numerics stage's line for a quantised cache: the worst record error in steps
/// among the records within tolerance.
std::string quantizationBudgetCheck(const Tolerance& tol,
                                    const std::map<int64_t, std::vector<StepAnalysis>>& analyses);

}  // namespace kvscope::detail
