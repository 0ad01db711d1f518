#include "CliChecks.hpp"

namespace kvscope::cli {

CLI::Validator wholeNumberIn(int64_t lo, int64_t hi, const std::string& what) {
  const std::string range = "a whole number from " + std::to_string(lo) + " to " +
                            std::to_string(hi) + " (" + what + ")";
  return CLI::Validator(
      [lo, hi, range](std::string& in) -> std::string {
        size_t used = 0;
        long long v = 0;
        try {
          v = std::stoll(in, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (in.empty() || used != in.size())
          return "'" + in + "' is not a whole number: give " + range;
        if (v < lo || v > hi) return in + " is out of range: give " + range;
        return "";
      },
      "INT in " + std::to_string(lo) + ".." + std::to_string(hi));
}

}  // namespace kvscope::cli
