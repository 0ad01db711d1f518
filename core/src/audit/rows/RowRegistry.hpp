// The failure matrix's rows, in the order the audit asks them (RowRegistry.cpp says why).
#pragma once

#include <string>
#include <vector>

#include "audit/rows/FailureRow.hpp"

namespace kvscope::detail {

class RowRegistry {
 public:
  /// Every row, in the order the walk and the stages ask them.
  static const std::vector<const FailureRow*>& rows();
  /// The same rows as the matrix lists them (RowSpec::listing): the method's rows first.
  static const std::vector<const FailureRow*>& listed();
  /// The row of finding `id`; throws std::out_of_range naming an unknown id.
  static const FailureRow& row(const std::string& id);
};

}  // namespace kvscope::detail
