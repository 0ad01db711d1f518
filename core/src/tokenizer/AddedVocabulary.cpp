#include "tokenizer/AddedVocabulary.hpp"

#include <algorithm>

#include "tokenizer/Normalizers.hpp"
#include "tokenizer/Utf8.hpp"

namespace kvscope::tok {

namespace {
// The code point that ends `s` (s non-empty, valid UTF-8).
char32_t lastChar(const std::string& s, std::size_t end) {
  std::size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  char32_t cp = 0;
  decodeUtf8(s, b, cp);
  return cp;
}

char32_t firstChar(const std::string& s, std::size_t begin) {
  char32_t cp = 0;
  decodeUtf8(s, begin, cp);
  return cp;
}
}  // namespace

void AddedVocabulary::add(const AddedToken& token) {
  auto it = byContent_.find(token.content);
  if (it != byContent_.end()) {
    byId_.erase(tokens_[it->second].id);
    tokens_[it->second] = token;
    byId_[token.id] = it->second;
    return;
  }
  byContent_[token.content] = tokens_.size();
  byId_[token.id] = tokens_.size();
  tokens_.push_back(token);
}

void AddedVocabulary::finalize(const Normalizer* normalizer) {
  raw_ = Matcher{};
  normalized_ = Matcher{};
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (t.content.empty()) continue;
    std::string pattern = t.content;
    Matcher& m = t.normalized ? normalized_ : raw_;
    if (t.normalized && normalizer) pattern = normalizer->normalize(pattern);
    if (pattern.empty()) continue;
    m.byFirstByte[static_cast<unsigned char>(pattern[0])].emplace_back(pattern, i);
  }
  for (Matcher* m : {&raw_, &normalized_}) {
    for (auto& [b, list] : m->byFirstByte) {
      std::stable_sort(list.begin(), list.end(),
                       [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
    }
  }
}

std::vector<AddedVocabulary::Segment> AddedVocabulary::split(const std::string& text,
                                                             bool normalizedSet) const {
  const Matcher& m = normalizedSet ? normalized_ : raw_;
  std::vector<Segment> out;
  if (m.byFirstByte.empty()) {
    out.push_back({0, text.size(), std::nullopt});
    return out;
  }
  std::size_t startOffset = 0;  // end of the last emitted segment
  std::size_t pos = 0;          // where the search for the next match resumes
  while (pos < text.size()) {
    // Leftmost-longest: first position with a match, longest pattern there.
    std::size_t matchAt = std::string::npos, matchLen = 0, tokenIndex = 0;
    for (std::size_t p = pos; p < text.size() && matchAt == std::string::npos; ++p) {
      auto it = m.byFirstByte.find(static_cast<unsigned char>(text[p]));
      if (it == m.byFirstByte.end()) continue;
      for (const auto& [pattern, idx] : it->second) {
        if (text.compare(p, pattern.size(), pattern) == 0) {
          matchAt = p;
          matchLen = pattern.size();
          tokenIndex = idx;
          break;
        }
      }
    }
    if (matchAt == std::string::npos) break;
    const AddedToken& tok = tokens_[tokenIndex];
    std::size_t start = matchAt, stop = matchAt + matchLen;
    pos = stop;
    if (tok.singleWord) {
      const bool startOk = start == 0 || !isWordChar(lastChar(text, start));
      const bool stopOk = stop == text.size() || !isWordChar(firstChar(text, stop));
      if (!startOk || !stopOk) continue;
    }
    if (tok.lstrip) {
      std::size_t s = start;
      while (s > 0) {
        std::size_t b = s - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        if (!isWhitespace(firstChar(text, b))) break;
        s = b;
      }
      start = std::max(s, startOffset);
    }
    if (tok.rstrip) {
      while (stop < text.size()) {
        char32_t cp = 0;
        const std::size_t len = decodeUtf8(text, stop, cp);
        if (len == 0 || !isWhitespace(cp)) break;
        stop += len;
      }
      pos = stop;
    }
    if (startOffset < start) out.push_back({startOffset, start, std::nullopt});
    out.push_back({start, stop, tok.id});
    startOffset = stop;
  }
  if (startOffset < text.size() || out.empty()) out.push_back({startOffset, text.size(), std::nullopt});
  return out;
}

std::optional<std::string> AddedVocabulary::idToToken(int64_t id) const {
  auto it = byId_.find(id);
  if (it == byId_.end()) return std::nullopt;
  return tokens_[it->second].content;
}

std::optional<int64_t> AddedVocabulary::tokenToId(const std::string& content) const {
  auto it = byContent_.find(content);
  if (it == byContent_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

bool AddedVocabulary::isSpecial(int64_t id) const {
  auto it = byId_.find(id);
  return it != byId_.end() && tokens_[it->second].special;
}

int64_t AddedVocabulary::maxId() const {
  int64_t m = -1;
  for (const auto& t : tokens_) m = std::max(m, t.id);
  return m;
}

}  // namespace kvscope::tok
