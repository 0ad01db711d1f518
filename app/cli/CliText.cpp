#include "CliText.hpp"

#include <iomanip>
#include <sstream>

#include "kvscope/Error.hpp"

namespace kvscope::cli {

std::string printable(const std::string& s) {
  std::ostringstream os;
  for (unsigned char c : s) {
    switch (c) {
      case '\n':
        os << "\\n";
        break;
      case '\t':
        os << "\\t";
        break;
      case '\r':
        os << "\\r";
        break;
      case '\\':
        os << "\\\\";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          os << "\\x" << std::hex << std::setw(2) << std::setfill('0') << static_cast<int>(c)
             << std::dec;
        } else {
          os << static_cast<char>(c);
        }
    }
  }
  return os.str();
}

std::vector<int64_t> parseIdList(const std::string& text, const std::string& option) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto first = item.find_first_not_of(" \t");
    const auto last = item.find_last_not_of(" \t");
    const std::string trimmed =
        first == std::string::npos ? std::string() : item.substr(first, last - first + 1);
    if (trimmed.empty())
      throw UsageError(option + " '" + text + "': empty entry (expected ids like 1,2,3)");
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(trimmed, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != trimmed.size())
      throw UsageError(option + " '" + text + "': '" + trimmed + "' is not an integer token id");
    out.push_back(v);
  }
  if (out.empty()) throw UsageError(option + " is empty (expected ids like 1,2,3)");
  if (text.find_last_not_of(" \t") != std::string::npos &&
      text[text.find_last_not_of(" \t")] == ',')
    throw UsageError(option + " '" + text + "': empty entry after the last comma");
  return out;
}

}  // namespace kvscope::cli
