// A compiled PCRE2 pattern in UTF + UCP mode (\p{L}, \s and \w are Unicode-aware, as in the
// Oniguruma/fancy-regex engines the HuggingFace tokenizers use).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvscope::tok {

class Regex {
 public:
  /// Compiles `pattern`; throws std::invalid_argument with PCRE2's message on failure.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// Non-overlapping matches, left to right, as [begin, end) byte offsets. An empty match
  /// advances the search by one character. `subject` must be valid UTF-8.
  std::vector<std::pair<std::size_t, std::size_t>> findAll(std::string_view subject) const;

  /// Escapes `literal` so that it matches itself.
  static std::string quote(std::string_view literal);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvscope::tok
