#include "kvscope/Error.hpp"

#include "util/UntrustedJson.hpp"

namespace kvscope {

namespace {
// Field names and details quote damaged input: they are made printable (bytes that are not
// UTF-8 and control characters become \xNN) and kept short before they reach a terminal.
constexpr std::size_t kMaxFieldBytes = 512;
constexpr std::size_t kMaxDetailBytes = 4096;

std::string formatInputError(const std::string& file, const std::string& field,
                             const std::string& detail) {
  std::string out = file.empty() ? std::string("input") : printableText(file, kMaxDetailBytes);
  if (!field.empty()) out += ": field '" + field + "'";
  out += ": " + detail;
  return out;
}
}  // namespace

InputError::InputError(std::string file, std::string field, std::string detail)
    : std::runtime_error(formatInputError(file, printableText(field, kMaxFieldBytes),
                                          printableText(detail, kMaxDetailBytes))),
      file_(std::move(file)),
      field_(printableText(field, kMaxFieldBytes)),
      detail_(printableText(detail, kMaxDetailBytes)) {}

}  // namespace kvscope
