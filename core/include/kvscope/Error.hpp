// Errors are values with context: which file, which field, what was expected.
// The library never exits or aborts; the CLI maps InputError/UsageError to exit code 2.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace kvscope {

/// Bad input the user gave: a malformed file, a wrong config, a truncated trace.
/// `file` is the path the user passed (or that was derived from it), `field` names the
/// JSON key, tensor name or header field that is wrong, `detail` says what was expected.
class InputError : public std::runtime_error {
 public:
  InputError(std::string file, std::string field, std::string detail);

  const std::string& file() const noexcept { return file_; }
  const std::string& field() const noexcept { return field_; }
  const std::string& detail() const noexcept { return detail_; }

 private:
  std::string file_;
  std::string field_;
  std::string detail_;
};

/// A request the caller made that cannot be honoured (bad parameter value, option
/// combination, a token past the context limit).
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace kvscope

namespace kvscope {

/// A token would need a position beyond the model's context (GPT-2 `n_positions`,
/// `max_position_embeddings`). Raised before any position row is read.
class ContextLimitError : public UsageError {
 public:
  ContextLimitError(int64_t position, int64_t limit)
      : UsageError("context limit reached: position " + std::to_string(position) +
                   " needs a row beyond the model's " + std::to_string(limit) + " positions"),
        position_(position),
        limit_(limit) {}
  int64_t position() const { return position_; }
  int64_t limit() const { return limit_; }

 private:
  int64_t position_;
  int64_t limit_;
};

}  // namespace kvscope

namespace kvscope {

/// The caller's cancel callback (AuditOptions::cancelled, EngineOptions::cancelled) asked
/// a running audit or generation to stop; thrown between requests or steps.
struct AuditCancelled : std::exception {
  const char* what() const noexcept override { return "audit cancelled"; }
};

}  // namespace kvscope
