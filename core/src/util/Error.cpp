#include "kvscope/Error.hpp"

namespace kvscope {

namespace {
std::string formatInputError(const std::string& file, const std::string& field,
                             const std::string& detail) {
  std::string out = file.empty() ? std::string("input") : file;
  if (!field.empty()) out += ": field '" + field + "'";
  out += ": " + detail;
  return out;
}
}  // namespace

InputError::InputError(std::string file, std::string field, std::string detail)
    : std::runtime_error(formatInputError(file, field, detail)),
      file_(std::move(file)),
      field_(std::move(field)),
      detail_(std::move(detail)) {}

}  // namespace kvscope
