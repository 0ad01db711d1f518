#include "tokenizer/Utf8.hpp"

#include <utf8proc.h>

#include "kvscope/Error.hpp"

namespace kvscope::tok {

namespace {
constexpr char32_t kReplacement = 0xFFFD;

// Length of the well-formed prefix of a sequence that starts at `pos` (Unicode Table 3-7),
// and whether it is complete. Used both for decoding and for lossy replacement.
std::size_t wellFormedPrefix(std::string_view s, std::size_t pos, bool& complete) {
  complete = false;
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) {
    complete = true;
    return 1;
  }
  std::size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  std::size_t len = 1;
  for (std::size_t k = 0; k < need; ++k) {
    if (pos + len >= s.size()) return len;
    const auto b = static_cast<unsigned char>(s[pos + len]);
    if (k == 0 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return len;
    ++len;
  }
  complete = true;
  return len;
}

int category(char32_t cp) { return utf8proc_category(static_cast<utf8proc_int32_t>(cp)); }
}  // namespace

std::size_t decodeUtf8(std::string_view s, std::size_t pos, char32_t& cp) {
  bool complete = false;
  const std::size_t len = wellFormedPrefix(s, pos, complete);
  if (!complete) {
    cp = kReplacement;
    return 0;
  }
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (len == 1) {
    cp = b0;
  } else {
    char32_t v = b0 & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    for (std::size_t k = 1; k < len; ++k) v = (v << 6) | (static_cast<unsigned char>(s[pos + k]) & 0x3F);
    cp = v;
  }
  return len;
}

std::size_t charLength(std::string_view s, std::size_t pos) {
  char32_t cp = 0;
  const std::size_t len = decodeUtf8(s, pos, cp);
  return len == 0 ? 1 : len;
}

void appendUtf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string toUtf8(char32_t cp) {
  std::string out;
  appendUtf8(out, cp);
  return out;
}

std::size_t findInvalidUtf8(std::string_view s) {
  std::size_t pos = 0;
  while (pos < s.size()) {
    bool complete = false;
    const std::size_t len = wellFormedPrefix(s, pos, complete);
    if (!complete) return pos;
    pos += len;
  }
  return std::string_view::npos;
}

void requireValidUtf8(std::string_view text) {
  const std::size_t bad = findInvalidUtf8(text);
  if (bad != std::string_view::npos) {
    throw UsageError("text to tokenize is not valid UTF-8 (malformed byte at offset " +
                     std::to_string(bad) + ")");
  }
}

std::string utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    bool complete = false;
    const std::size_t len = wellFormedPrefix(bytes, pos, complete);
    if (complete) {
      out.append(bytes.data() + pos, len);
      pos += len;
    } else {
      appendUtf8(out, kReplacement);
      pos += len == 0 ? 1 : len;
    }
  }
  return out;
}

std::vector<std::string_view> splitChars(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  std::size_t pos = 0;
  while (pos < s.size()) {
    const std::size_t len = charLength(s, pos);
    out.push_back(s.substr(pos, len));
    pos += len;
  }
  return out;
}

std::vector<char32_t> codePoints(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  std::size_t pos = 0;
  while (pos < s.size()) {
    char32_t cp = 0;
    const std::size_t len = decodeUtf8(s, pos, cp);
    out.push_back(cp);
    pos += len == 0 ? 1 : len;
  }
  return out;
}

bool isWhitespace(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85:
    case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool isNumeric(char32_t cp) {
  const int c = category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool isAlphanumeric(char32_t cp) {
  const int c = category(cp);
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) || isNumeric(cp);
}

bool isCombiningMark(char32_t cp) {
  const int c = category(cp);
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

bool isWordChar(char32_t cp) {
  return isAlphanumeric(cp) || isCombiningMark(cp) || category(cp) == UTF8PROC_CATEGORY_PC;
}

bool isPunctuation(char32_t cp) {
  const int c = category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

}  // namespace kvscope::tok
