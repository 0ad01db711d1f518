// The failure matrix of the audit method: each finding id, the observation that raises it
// and the first thing to check.
#pragma once

#include <string>
#include <vector>

namespace kvscope {

struct FailureMatrixRow {
  std::string id;           // stable finding id
  std::string observation;  // what the audit saw
  std::string firstCheck;   // where to look first
};

class FailureMatrix {
 public:
  static const std::vector<FailureMatrixRow>& rows();
  /// The row for `id`; throws std::out_of_range for an unknown id.
  static const FailureMatrixRow& row(const std::string& id);
};

}  // namespace kvscope
