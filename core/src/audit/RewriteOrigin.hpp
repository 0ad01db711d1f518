// Where did the rewritten rows of a cache come from? When a step's snapshot shows that
// earlier rows of a layer changed (an engine replaced the whole cache tensor, or another
// request was written into this one's cache), the rows are compared with the reference:
// another layer's at the same positions (wrong-layer reuse, old rows included), or another
// request's (cross-request contamination).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "audit/StepAnalysis.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/AuditResult.hpp"

namespace kvscope::detail {

struct RewriteMatch {
  std::string kind;           // wrong_layer | cross_request
  int64_t sourceLayer = -1;   // wrong_layer: the layer whose reference the rows equal
  int64_t otherRequest = -1;  // cross_request: the request whose reference they equal
  int64_t rows = 0;           // rewritten rows compared
  double error = 0.0;         // max |row - matching reference|
  double ownError = 0.0;      // max |row - own reference|
};

/// The rewritten cache entries of `a` in words ("entries 0..5"; "" without a snapshot).
inline std::string rewrittenEntriesText(const StepAnalysis& a) {
  return a.rewrittenColumns.empty() ? std::string()
                                    : "entries " + std::to_string(a.rewrittenColumns.front()) +
                                          ".." + std::to_string(a.rewrittenColumns.back());
}

class RewriteOrigin {
 public:
  RewriteOrigin(const Tolerance& tol, const std::map<int64_t, const RequestReference*>& references)
      : tol_(tol), references_(references) {}
  /// Explains the rewritten rows of `a.rewrittenLayer` (needs the step's snapshot).
  std::optional<RewriteMatch> explain(int64_t request, const StepAnalysis& a,
                                      const RequestReference& own) const;

 private:
  /// Max error of every rewritten row against `ref`'s layer `refLayer` at the same stream
  /// positions; infinity when a row does not match within tolerance.
  double matchAt(const StepAnalysis& a, const RequestReference& ref, size_t refLayer,
                 int64_t& rows) const;
  const Tolerance& tol_;
  const std::map<int64_t, const RequestReference*>& references_;
};

}  // namespace kvscope::detail
