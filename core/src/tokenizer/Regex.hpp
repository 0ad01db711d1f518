// A compiled PCRE2 pattern in UTF + UCP mode, its escapes rewritten first (fromOniguruma) so
// that it matches what the Oniguruma engine of the HuggingFace tokenizers matches.
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

  /// `pattern` as PCRE2 must read it to match what HuggingFace `tokenizers` (Oniguruma)
  /// matches: \s, \w, \d, \h, \uHHHH and the Unicode 15-16 members of \p{L}, \p{N}, ...
  /// The constructor applies it; exposed for tests.
  static std::string fromOniguruma(std::string_view pattern);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvscope::tok
