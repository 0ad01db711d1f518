// Reading JSON that someone else wrote: a nesting-depth limit enforced while parsing (so a
// 100,000-deep document is refused instead of overflowing the stack of whatever walks it
// later), integers read without wrapping, and values quoted in error messages short and
// printable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "util/InputLimits.hpp"

namespace kvscope {

/// Parses `text` as JSON. A syntax error or a document nested deeper than `maxDepth`
/// levels is an InputError naming `file`; for syntax errors the field is `field` (when
/// empty: the line and column), for the depth limit the JSON path where it was reached.
nlohmann::json parseUntrustedJson(std::string_view text, const std::string& file,
                                  const std::string& field = "", int maxDepth = limits::kJsonDepth);

/// Reads the whole file and parses it as above ("cannot open file" when it cannot be read).
nlohmann::json parseUntrustedJsonFile(const std::string& path, int maxDepth = limits::kJsonDepth);

/// `v` as an int64 when it is an integer that fits (a large unsigned value does not; a
/// float never does).
std::optional<int64_t> jsonInt64(const nlohmann::json& v);
/// `v` as a uint64 when it is a non-negative integer.
std::optional<uint64_t> jsonUint64(const nlohmann::json& v);
/// `d` as an int64 when it is finite, integral and in range (a cast would be undefined
/// behaviour otherwise).
std::optional<int64_t> doubleToInt64(double d);

/// A short, printable rendering of `v` for an error message: at most about `maxChars`
/// characters, nested values elided.
std::string jsonPreview(const nlohmann::json& v, std::size_t maxChars = 60);

/// `text` with every byte that is not part of valid UTF-8, and every control character but
/// newline and tab, written as \xNN; cut (at a character boundary) after `maxBytes` bytes.
std::string printableText(std::string_view text, std::size_t maxBytes = 4096);

}  // namespace kvscope
