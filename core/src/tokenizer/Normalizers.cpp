#include "tokenizer/Normalizers.hpp"

#include <utf8proc.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "tokenizer/ByteLevel.hpp"
#include "tokenizer/Regex.hpp"
#include "tokenizer/Utf8.hpp"

namespace kvscope::tok {

std::string unicodeNormalize(const std::string& text, const std::string& form) {
  int options = UTF8PROC_STABLE;
  if (form == "NFC") options |= UTF8PROC_COMPOSE;
  else if (form == "NFD") options |= UTF8PROC_DECOMPOSE;
  else if (form == "NFKC") options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  else if (form == "NFKD") options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  else throw std::invalid_argument("unknown normalization form " + form);
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                              static_cast<utf8proc_ssize_t>(text.size()), &out,
                              static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    throw std::runtime_error(std::string("Unicode normalization failed: ") + utf8proc_errmsg(n));
  }
  std::string result(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
  std::free(out);
  return result;
}

namespace {

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(std::string form) : form_(std::move(form)) {}
  std::string normalize(const std::string& text) const override { return unicodeNormalize(text, form_); }

 private:
  std::string form_;
};

// Rust's str::to_lowercase: simple per-character mapping plus the two context rules that
// matter in practice (U+0130 -> "i\u0307", final sigma).
std::string lowercase(const std::string& text) {
  const auto cps = codePoints(text);
  std::string out;
  out.reserve(text.size());
  auto isCased = [](char32_t c) {
    return utf8proc_tolower(static_cast<utf8proc_int32_t>(c)) != static_cast<utf8proc_int32_t>(c) ||
           utf8proc_toupper(static_cast<utf8proc_int32_t>(c)) != static_cast<utf8proc_int32_t>(c);
  };
  for (std::size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    if (c == 0x130) {
      out += "i\xCC\x87";
    } else if (c == 0x3A3) {
      const bool before = i > 0 && isCased(cps[i - 1]);
      const bool after = i + 1 < cps.size() && isCased(cps[i + 1]);
      appendUtf8(out, before && !after ? 0x3C2 : 0x3C3);
    } else {
      appendUtf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
  return out;
}

class Lowercase final : public Normalizer {
 public:
  std::string normalize(const std::string& text) const override { return lowercase(text); }
};

std::string stripWhitespace(const std::string& text, bool left, bool right) {
  const auto chars = splitChars(text);
  std::size_t b = 0, e = chars.size();
  auto ws = [&chars](std::size_t i) {
    char32_t cp = 0;
    decodeUtf8(chars[i], 0, cp);
    return isWhitespace(cp);
  };
  if (left) while (b < e && ws(b)) ++b;
  if (right) while (e > b && ws(e - 1)) --e;
  if (b == e) return std::string();
  const std::size_t from = static_cast<std::size_t>(chars[b].data() - text.data());
  const std::size_t to = static_cast<std::size_t>(chars[e - 1].data() - text.data()) + chars[e - 1].size();
  return text.substr(from, to - from);
}

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(const std::string& text) const override {
    return stripWhitespace(text, left_, right_);
  }

 private:
  bool left_, right_;
};

std::string removeCombiningMarks(const std::string& text) {
  std::string out;
  for (char32_t c : codePoints(text)) {
    if (!isCombiningMark(c)) appendUtf8(out, c);
  }
  return out;
}

class StripAccents final : public Normalizer {
 public:
  std::string normalize(const std::string& text) const override { return removeCombiningMarks(text); }
};

class Affix final : public Normalizer {
 public:
  Affix(std::string affix, bool prepend) : affix_(std::move(affix)), prepend_(prepend) {}
  std::string normalize(const std::string& text) const override {
    if (text.empty()) return text;
    return prepend_ ? affix_ + text : text + affix_;
  }

 private:
  std::string affix_;
  bool prepend_;
};

class Replace final : public Normalizer {
 public:
  Replace(std::unique_ptr<Regex> regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  std::string normalize(const std::string& text) const override {
    std::string out;
    std::size_t prev = 0;
    for (const auto& [b, e] : regex_->findAll(text)) {
      out.append(text, prev, b - prev);
      out += content_;
      prev = e;
    }
    out.append(text, prev, std::string::npos);
    return out;
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class ByteLevelNormalizer final : public Normalizer {
 public:
  std::string normalize(const std::string& text) const override {
    return ByteLevel::instance().encode(text);
  }
};

bool isChineseChar(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool cleanText, bool chinese, bool stripAccents, bool lower)
      : cleanText_(cleanText), chinese_(chinese), stripAccents_(stripAccents), lower_(lower) {}
  std::string normalize(const std::string& text) const override {
    std::string s;
    for (char32_t c : codePoints(text)) {
      if (cleanText_) {
        const int cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
        const bool control = c != '\t' && c != '\n' && c != '\r' &&
                             (cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
                              cat == UTF8PROC_CATEGORY_CN || cat == UTF8PROC_CATEGORY_CO);
        if (c == 0 || c == 0xFFFD || control) continue;
        if (isWhitespace(c)) c = ' ';
      }
      if (chinese_ && isChineseChar(c)) {
        s += ' ';
        appendUtf8(s, c);
        s += ' ';
      } else {
        appendUtf8(s, c);
      }
    }
    if (stripAccents_) s = removeCombiningMarks(unicodeNormalize(s, "NFD"));
    if (lower_) s = lowercase(s);
    return s;
  }

 private:
  bool cleanText_, chinese_, stripAccents_, lower_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string normalize(const std::string& text) const override {
    std::string s = text;
    for (const auto& p : parts_) s = p->normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> makeNormalizer(const JsonFields& jf, const Json& spec,
                                           const std::string& path) {
  const std::string type = jf.str(spec, path, "type");
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    return std::make_unique<UnicodeForm>(type);
  }
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip") {
    return std::make_unique<Strip>(jf.boolean(spec, path, "strip_left", true),
                                   jf.boolean(spec, path, "strip_right", true));
  }
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Prepend") return std::make_unique<Affix>(jf.str(spec, path, "prepend"), true);
  if (type == "Append") return std::make_unique<Affix>(jf.str(spec, path, "append"), false);
  if (type == "Replace") {
    return std::make_unique<Replace>(makePattern(jf, spec, path), jf.str(spec, path, "content"));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "BertNormalizer") {
    const bool lower = jf.boolean(spec, path, "lowercase", true);
    return std::make_unique<BertNormalizer>(jf.boolean(spec, path, "clean_text", true),
                                            jf.boolean(spec, path, "handle_chinese_chars", true),
                                            jf.boolean(spec, path, "strip_accents", lower), lower);
  }
  if (type == "Sequence") {
    const std::string listPath = JsonFields::join(path, "normalizers");
    const Json& list = jf.require(spec, path, "normalizers");
    jf.requireArray(list, listPath);
    const JsonFields::Nesting nesting(jf, listPath);
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (std::size_t i = 0; i < list.size(); ++i) {
      parts.push_back(makeNormalizer(jf, list[i], JsonFields::index(listPath, i)));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  jf.fail(JsonFields::join(path, "type"),
          "unsupported normalizer '" + type +
              "' (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Prepend, "
              "Append, Replace, BertNormalizer, ByteLevel, Sequence)");
}

std::unique_ptr<Regex> makePattern(const JsonFields& jf, const Json& spec, const std::string& path) {
  const std::string patPath = JsonFields::join(path, "pattern");
  const Json& pat = jf.require(spec, path, "pattern");
  jf.requireObject(pat, patPath);
  std::string regex;
  if (const Json* s = jf.find(pat, "String")) {
    regex = Regex::quote(jf.asString(*s, JsonFields::join(patPath, "String")));
  } else if (const Json* r = jf.find(pat, "Regex")) {
    regex = jf.asString(*r, JsonFields::join(patPath, "Regex"));
  } else {
    jf.fail(patPath, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  try {
    return std::make_unique<Regex>(regex);
  } catch (const std::invalid_argument& e) {
    jf.fail(patPath, e.what());
  }
}

}  // namespace kvscope::tok
