// How the audit writes a number into a sentence: the shortest form with `digits`
// significant digits ("3.7", "1.2e-05"). One rule for every stage and finding text.
#pragma once

#include <sstream>
#include <string>

namespace kvscope::detail {

inline std::string numberText(double v, int digits = 4) {
  std::ostringstream os;
  os.precision(digits);
  os << v;
  return os.str();
}

}  // namespace kvscope::detail
