#include "tokenizer/PreTokenizers.hpp"

#include <functional>
#include <stdexcept>

#include "tokenizer/ByteLevel.hpp"
#include "tokenizer/Normalizers.hpp"
#include "tokenizer/Regex.hpp"
#include "tokenizer/Utf8.hpp"

namespace kvscope::tok {

const char* const kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct Span {
  std::size_t begin, end;
  bool isMatch;
};

// Turns matches into the full cover of `text` (matches and the gaps between them).
std::vector<Span> coverFromMatches(const std::vector<std::pair<std::size_t, std::size_t>>& matches,
                                   std::size_t size) {
  std::vector<Span> spans;
  if (size == 0) return {{0, 0, false}};
  std::size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  }
  if (prev != size) spans.push_back({prev, size, false});
  return spans;
}

// Each character satisfying `pred` is its own match (tokenizers' char-predicate Pattern).
std::vector<Span> coverFromPredicate(const std::string& text, const std::function<bool(char32_t)>& pred) {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  std::size_t pos = 0;
  while (pos < text.size()) {
    char32_t cp = 0;
    std::size_t len = decodeUtf8(text, pos, cp);
    if (len == 0) len = 1;
    if (pred(cp)) matches.emplace_back(pos, pos + len);
    pos += len;
  }
  return coverFromMatches(matches, text.size());
}

// tokenizers' NormalizedString::split: applies the delimiter behavior, then drops empties.
void splitPiece(const PreToken& piece, std::vector<Span> spans, Behavior behavior, bool invert,
                std::vector<PreToken>& out) {
  if (invert) {
    for (auto& s : spans) s.isMatch = !s.isMatch;
  }
  std::vector<Span> parts;
  switch (behavior) {
    case Behavior::Isolated:
      parts = spans;
      break;
    case Behavior::Removed:
      for (const auto& s : spans) {
        if (!s.isMatch) parts.push_back(s);
      }
      break;
    case Behavior::MergedWithPrevious: {
      bool previousMatch = false;
      for (const auto& s : spans) {
        if (s.isMatch && !previousMatch && !parts.empty()) {
          parts.back().end = s.end;
        } else {
          parts.push_back({s.begin, s.end, false});
        }
        previousMatch = s.isMatch;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool previousMatch = false;
      std::vector<Span> rev;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->isMatch && !previousMatch && !rev.empty()) {
          rev.back().begin = it->begin;
        } else {
          rev.push_back({it->begin, it->end, false});
        }
        previousMatch = it->isMatch;
      }
      parts.assign(rev.rbegin(), rev.rend());
      break;
    }
    case Behavior::Contiguous: {
      bool previousMatch = false;
      bool first = true;
      for (const auto& s : spans) {
        if (!first && s.isMatch == previousMatch) {
          parts.back().end = s.end;
        } else {
          parts.push_back({s.begin, s.end, false});
        }
        previousMatch = s.isMatch;
        first = false;
      }
      break;
    }
  }
  for (const auto& p : parts) {
    if (p.end > p.begin) {
      out.push_back({piece.text.substr(p.begin, p.end - p.begin), piece.atStart && p.begin == 0});
    }
  }
}

// Applies `fn` to each piece, collecting the replacement pieces.
template <typename Fn>
void forEachPiece(std::vector<PreToken>& pieces, Fn fn) {
  std::vector<PreToken> out;
  out.reserve(pieces.size());
  for (const auto& p : pieces) fn(p, out);
  pieces = std::move(out);
}

class ByteLevelPre final : public PreTokenizer {
 public:
  ByteLevelPre(bool addPrefixSpace, bool useRegex) : addPrefixSpace_(addPrefixSpace) {
    if (useRegex) regex_ = std::make_unique<Regex>(kGpt2SplitPattern);
  }
  void preTokenize(std::vector<PreToken>& pieces) const override {
    forEachPiece(pieces, [this](const PreToken& p, std::vector<PreToken>& out) {
      PreToken piece = p;
      if (addPrefixSpace_ && (piece.text.empty() || piece.text[0] != ' ')) piece.text.insert(0, " ");
      std::vector<PreToken> split;
      if (regex_) {
        splitPiece(piece, coverFromMatches(regex_->findAll(piece.text), piece.text.size()),
                   Behavior::Isolated, false, split);
      } else if (!piece.text.empty()) {
        split.push_back(piece);
      }
      const ByteLevel& table = ByteLevel::instance();
      for (auto& s : split) out.push_back({table.encode(s.text), s.atStart});
    });
  }

 private:
  bool addPrefixSpace_;
  std::unique_ptr<Regex> regex_;
};

class SplitPre final : public PreTokenizer {
 public:
  SplitPre(std::unique_ptr<Regex> regex, Behavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void preTokenize(std::vector<PreToken>& pieces) const override {
    forEachPiece(pieces, [this](const PreToken& p, std::vector<PreToken>& out) {
      splitPiece(p, coverFromMatches(regex_->findAll(p.text), p.text.size()), behavior_, invert_, out);
    });
  }

 private:
  std::unique_ptr<Regex> regex_;
  Behavior behavior_;
  bool invert_;
};

class PredicatePre final : public PreTokenizer {
 public:
  PredicatePre(std::function<bool(char32_t)> pred, Behavior behavior)
      : pred_(std::move(pred)), behavior_(behavior) {}
  void preTokenize(std::vector<PreToken>& pieces) const override {
    forEachPiece(pieces, [this](const PreToken& p, std::vector<PreToken>& out) {
      splitPiece(p, coverFromPredicate(p.text, pred_), behavior_, false, out);
    });
  }

 private:
  std::function<bool(char32_t)> pred_;
  Behavior behavior_;
};

enum class PrependScheme { First, Always, Never };

class MetaspacePre final : public PreTokenizer {
 public:
  MetaspacePre(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {
    char32_t cp = 0;
    decodeUtf8(replacement_, 0, cp);
    replacementCp_ = cp;
  }
  void preTokenize(std::vector<PreToken>& pieces) const override {
    forEachPiece(pieces, [this](const PreToken& p, std::vector<PreToken>& out) {
      PreToken piece{std::string(), p.atStart};
      for (char c : p.text) {
        if (c == ' ') piece.text += replacement_;
        else piece.text += c;
      }
      const bool startsWithRep = piece.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!startsWithRep && (scheme_ == PrependScheme::Always ||
                             (scheme_ == PrependScheme::First && piece.atStart))) {
        piece.text.insert(0, replacement_);
      }
      if (!split_) {
        if (!piece.text.empty()) out.push_back(piece);
        return;
      }
      const char32_t rep = replacementCp_;
      splitPiece(piece, coverFromPredicate(piece.text, [rep](char32_t c) { return c == rep; }),
                 Behavior::MergedWithNext, false, out);
    });
  }

 private:
  std::string replacement_;
  char32_t replacementCp_ = 0;
  PrependScheme scheme_;
  bool split_;
};

class SequencePre final : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void preTokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& p : parts_) p->preTokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

bool isBertPunctuation(char32_t c) {
  return (c < 128 && ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                      (c >= 123 && c <= 126))) ||
         isPunctuation(c);
}

Behavior parseBehavior(const JsonFields& jf, const Json& spec, const std::string& path,
                       const std::string& fallback) {
  const std::string b = jf.str(spec, path, "behavior", fallback);
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  jf.fail(JsonFields::join(path, "behavior"),
          "unknown split behavior '" + b +
              "' (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

std::unique_ptr<Regex> compile(const JsonFields& jf, const std::string& pattern, const std::string& path) {
  try {
    return std::make_unique<Regex>(pattern);
  } catch (const std::invalid_argument& e) {
    jf.fail(path, e.what());
  }
}

}  // namespace

std::unique_ptr<PreTokenizer> makeByteLevelPreTokenizer(bool addPrefixSpace, bool useRegex) {
  return std::make_unique<ByteLevelPre>(addPrefixSpace, useRegex);
}

std::unique_ptr<PreTokenizer> makePreTokenizer(const JsonFields& jf, const Json& spec,
                                               const std::string& path) {
  const std::string type = jf.str(spec, path, "type");
  if (type == "ByteLevel") {
    return makeByteLevelPreTokenizer(jf.boolean(spec, path, "add_prefix_space", true),
                                     jf.boolean(spec, path, "use_regex", true));
  }
  if (type == "Split") {
    return std::make_unique<SplitPre>(makePattern(jf, spec, path),
                                      parseBehavior(jf, spec, path, "Isolated"),
                                      jf.boolean(spec, path, "invert", false));
  }
  if (type == "Metaspace") {
    const std::string rep = jf.str(spec, path, "replacement", "\xE2\x96\x81");
    if (rep.empty() || charLength(rep, 0) != rep.size()) {
      jf.fail(JsonFields::join(path, "replacement"), "expected a single character");
    }
    PrependScheme scheme = PrependScheme::Always;
    if (const auto s = jf.optStr(spec, path, "prepend_scheme")) {
      if (*s == "first") scheme = PrependScheme::First;
      else if (*s == "always") scheme = PrependScheme::Always;
      else if (*s == "never") scheme = PrependScheme::Never;
      else jf.fail(JsonFields::join(path, "prepend_scheme"), "expected first, always or never");
    } else if (!jf.boolean(spec, path, "add_prefix_space", true)) {
      scheme = PrependScheme::Never;  // files written before prepend_scheme existed
    }
    return std::make_unique<MetaspacePre>(rep, scheme, jf.boolean(spec, path, "split", true));
  }
  if (type == "Whitespace") {
    // `tokenizers` runs \w+|[^\w\s]+ here with the Rust regex crate, not Oniguruma: its \w
    // is UTS #18's (Alphabetic, marks, decimal digits, connector punctuation, Join_Control).
    // Spelled out so that Regex's Oniguruma rewrite of \w does not apply; \p{L}, \p{M} and
    // \p{Nd} pick up the Unicode 15-16 additions there.
    auto regex = compile(jf,
                         R"([\p{Alphabetic}\p{L}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]+)"
                         R"(|[^\p{Alphabetic}\p{L}\p{M}\p{Nd}\p{Pc}\p{Join_Control}\s]+)",
                         path);
    return std::make_unique<SplitPre>(std::move(regex), Behavior::Removed, true);
  }
  if (type == "WhitespaceSplit") {
    return std::make_unique<PredicatePre>(isWhitespace, Behavior::Removed);
  }
  if (type == "Digits") {
    const bool individual = jf.boolean(spec, path, "individual_digits", false);
    return std::make_unique<PredicatePre>([](char32_t c) { return c >= '0' && c <= '9'; },
                                          individual ? Behavior::Isolated : Behavior::Contiguous);
  }
  if (type == "Punctuation") {
    return std::make_unique<PredicatePre>(isBertPunctuation, parseBehavior(jf, spec, path, "Isolated"));
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    parts.push_back(std::make_unique<PredicatePre>(isWhitespace, Behavior::Removed));
    parts.push_back(std::make_unique<PredicatePre>(isBertPunctuation, Behavior::Isolated));
    return std::make_unique<SequencePre>(std::move(parts));
  }
  if (type == "CharDelimiterSplit") {
    const std::string d = jf.str(spec, path, "delimiter");
    char32_t cp = 0;
    if (d.empty() || decodeUtf8(d, 0, cp) != d.size()) {
      jf.fail(JsonFields::join(path, "delimiter"), "expected a single character");
    }
    return std::make_unique<PredicatePre>([cp](char32_t c) { return c == cp; }, Behavior::Removed);
  }
  if (type == "Sequence") {
    const std::string listPath = JsonFields::join(path, "pretokenizers");
    const Json& list = jf.require(spec, path, "pretokenizers");
    jf.requireArray(list, listPath);
    const JsonFields::Nesting nesting(jf, listPath);
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (std::size_t i = 0; i < list.size(); ++i) {
      parts.push_back(makePreTokenizer(jf, list[i], JsonFields::index(listPath, i)));
    }
    return std::make_unique<SequencePre>(std::move(parts));
  }
  jf.fail(JsonFields::join(path, "type"),
          "unsupported pre-tokenizer '" + type +
              "' (supported: ByteLevel, Split, Metaspace, Whitespace, WhitespaceSplit, Digits, "
              "Punctuation, BertPreTokenizer, CharDelimiterSplit, Sequence)");
}

}  // namespace kvscope::tok
