// Where did a mismatching K/V record really come from? Looks for the same values in the
// reference at other layers (wrong layer), other positions (position offset, via the
// layer-0 position probe) and other requests (cross-request mixing).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "audit/ReferenceSet.hpp"
#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/AuditResult.hpp"

namespace kvscope::detail {

struct SignatureMatch {
  std::string kind;        // wrong_layer | position | cross_request
  int64_t layer = -1;      // the layer whose reference matched
  int64_t position = -1;   // the stream position (or position id) that matched
  int64_t request = -1;    // the request whose reference matched
  double error = 0.0;      // max |record - match|
  double ownError = 0.0;   // max |record - own reference|
};

class SignatureSearch {
 public:
  SignatureSearch(ReferenceSet& refs, const Tolerance& tol,
                  const std::map<int64_t, const RequestReference*>& otherRequests)
      : refs_(refs), tol_(tol), others_(otherRequests) {}

  /// The best explanation for the first bad record of `a` (request `request`), if any.
  std::optional<SignatureMatch> explain(int64_t request, const StepAnalysis& a, const RequestReference& own);

 private:
  ReferenceSet& refs_;
  const Tolerance& tol_;
  const std::map<int64_t, const RequestReference*>& others_;
};

}  // namespace kvscope::detail
