#include "tokenizer/ByteLevel.hpp"

#include "tokenizer/Utf8.hpp"

namespace kvscope::tok {

ByteLevel::ByteLevel() {
  // Printable bytes keep their own code point; the rest are shifted to 256, 257, ...
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    byteToCp_[b] = printable ? static_cast<char32_t>(b) : next++;
    byteToChar_[b] = toUtf8(byteToCp_[b]);
  }
}

const ByteLevel& ByteLevel::instance() {
  static const ByteLevel table;
  return table;
}

std::string ByteLevel::encode(std::string_view text) const {
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text) out += byteToChar_[static_cast<unsigned char>(c)];
  return out;
}

std::optional<unsigned char> ByteLevel::byteFor(char32_t cp) const {
  if (cp < 256) {
    const bool printable = (cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174);
    if (printable) return static_cast<unsigned char>(cp);
    return std::nullopt;
  }
  if (cp < 256 + 68) {
    for (int b = 0; b < 256; ++b) {
      if (byteToCp_[b] == cp) return static_cast<unsigned char>(b);
    }
  }
  return std::nullopt;
}

std::optional<std::string> ByteLevel::decodeToken(std::string_view token) const {
  std::string out;
  out.reserve(token.size());
  std::size_t pos = 0;
  while (pos < token.size()) {
    char32_t cp = 0;
    const std::size_t len = decodeUtf8(token, pos, cp);
    if (len == 0) return std::nullopt;
    const auto b = byteFor(cp);
    if (!b) return std::nullopt;
    out += static_cast<char>(*b);
    pos += len;
  }
  return out;
}

}  // namespace kvscope::tok
