// GPT-2's reversible byte <-> printable-character mapping (`bytes_to_unicode`).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace kvscope::tok {

class ByteLevel {
 public:
  static const ByteLevel& instance();

  /// The UTF-8 spelling of the character that stands for byte `b`.
  const std::string& charFor(unsigned char b) const { return byteToChar_[b]; }
  /// Maps every byte of `text` to its character.
  std::string encode(std::string_view text) const;
  /// The byte a code point stands for, if any.
  std::optional<unsigned char> byteFor(char32_t cp) const;
  /// Maps a token back to bytes; nullopt when some character is not in the table.
  std::optional<std::string> decodeToken(std::string_view token) const;

 private:
  ByteLevel();
  std::array<std::string, 256> byteToChar_;
  std::array<char32_t, 256> byteToCp_{};
};

}  // namespace kvscope::tok
