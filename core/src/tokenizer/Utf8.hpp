// UTF-8 helpers shared by the tokenizers: code point iteration, lossy decoding and the
// Unicode character classes the HuggingFace pipeline relies on (whitespace, alphanumeric,
// punctuation), answered through utf8proc.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::tok {

/// Decodes the code point at `pos`. Returns its byte length, or 0 when the bytes there are
/// not well-formed UTF-8 (then `cp` is U+FFFD).
std::size_t decodeUtf8(std::string_view s, std::size_t pos, char32_t& cp);
/// Byte length of the character at `pos`; a malformed byte counts as one character.
std::size_t charLength(std::string_view s, std::size_t pos);
void appendUtf8(std::string& out, char32_t cp);
std::string toUtf8(char32_t cp);

/// Byte offset of the first malformed sequence, or npos when `s` is valid UTF-8.
std::size_t findInvalidUtf8(std::string_view s);
/// Throws UsageError when `text` is not valid UTF-8.
void requireValidUtf8(std::string_view text);
/// Like Rust's String::from_utf8_lossy: each maximal ill-formed subpart becomes U+FFFD.
std::string utf8Lossy(std::string_view bytes);

/// The characters of `s`, each as a view into it.
std::vector<std::string_view> splitChars(std::string_view s);
std::vector<char32_t> codePoints(std::string_view s);

bool isWhitespace(char32_t cp);     // Unicode White_Space (Rust char::is_whitespace)
bool isAlphanumeric(char32_t cp);   // letters and numbers (Rust char::is_alphanumeric)
bool isWordChar(char32_t cp);       // regex \w: alphanumeric, marks, connector punctuation
bool isPunctuation(char32_t cp);    // Unicode P* categories
bool isCombiningMark(char32_t cp);  // Mn, Mc, Me
bool isNumeric(char32_t cp);        // Nd, Nl, No

}  // namespace kvscope::tok
