// Small text helpers shared by kvscope-cli subcommands: printable token strings and
// comma-separated integer lists.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::cli {

/// Control characters and backslashes escaped so a token reads on one line.
std::string printable(const std::string& s);

/// "1,2, 3" -> {1, 2, 3}. Throws UsageError naming `option` for an empty list or an entry
/// that is not an integer.
std::vector<int64_t> parseIdList(const std::string& text, const std::string& option);

}  // namespace kvscope::cli
