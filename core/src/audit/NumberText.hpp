// How the audit writes a number into a sentence: the shortest form with `digits`
// significant digits ("3.7", "1.2e-05"). One rule for every stage and finding text.
#pragma once

#include <iterator>
#include <sstream>
#include <string>

namespace kvscope::detail {

inline std::string numberText(double v, int digits = 4) {
  std::ostringstream os;
  os.precision(digits);
  os << v;
  return os.str();
}

/// Integers as a sentence lists them: "1", "1 and 3", "0, 2 and 4".
template <class Ints>
std::string listText(const Ints& values) {
  std::string s;
  for (auto it = values.begin(); it != values.end(); ++it)
    s += (s.empty() ? "" : std::next(it) == values.end() ? " and " : ", ") + std::to_string(*it);
  return s;
}

}  // namespace kvscope::detail
