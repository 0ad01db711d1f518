// Checks of kvscope-cli option values whose failures say in plain words what is accepted
// (CLI11's own range checks print their limits as "0 to 1.79769e+308").
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace kvscope::cli {

/// A whole number from `lo` to `hi`; `what` names it in the message:
/// "--rows: 0 is out of range: give a whole number from 1 to 100000 (cache positions drawn)".
CLI::Validator wholeNumberIn(int64_t lo, int64_t hi, const std::string& what);

}  // namespace kvscope::cli
