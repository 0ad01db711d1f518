// HuggingFace normalizers (tokenizer.json "normalizer"): NFC/NFD/NFKC/NFKD, Lowercase,
// Strip, StripAccents, Prepend, Append, Replace, BertNormalizer, ByteLevel, Sequence.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/JsonFields.hpp"

namespace kvscope::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(const std::string& text) const = 0;
};

/// Builds the normalizer described by `spec` (the JSON object at `path`); an unknown or
/// malformed one is an InputError naming the field.
std::unique_ptr<Normalizer> makeNormalizer(const JsonFields& jf, const Json& spec,
                                           const std::string& path);

class Regex;
/// The {"pattern": {"String": s} | {"Regex": r}} member of `spec` (Replace, Split), compiled;
/// a String pattern matches literally.
std::unique_ptr<Regex> makePattern(const JsonFields& jf, const Json& spec, const std::string& path);

/// Unicode normalization forms through utf8proc ("NFC", "NFD", "NFKC", "NFKD").
std::string unicodeNormalize(const std::string& text, const std::string& form);

}  // namespace kvscope::tok
