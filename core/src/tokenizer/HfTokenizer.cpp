#include "tokenizer/HfTokenizer.hpp"

#include <algorithm>

#include "tokenizer/Utf8.hpp"

namespace kvscope::tok {

namespace {
void replaceAll(std::string& s, const std::string& from, const std::string& to) {
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
}
}  // namespace

HfTokenizer::HfTokenizer(HfPipeline pipeline) : p_(std::move(pipeline)) {
  p_.added.finalize(p_.normalizer.get());
}

void HfTokenizer::encodePlain(const std::string& text, bool atStart, Encoding& out) const {
  std::vector<PreToken> pieces{{text, atStart}};
  if (p_.preTokenizer) p_.preTokenizer->preTokenize(pieces);
  for (const auto& piece : pieces) {
    for (int64_t id : p_.model->tokenize(piece.text)) {
      out.ids.push_back(id);
      out.tokens.push_back(p_.model->idToToken(id).value_or(std::string()));
    }
  }
}

Encoding HfTokenizer::encode(const std::string& text, bool addSpecialTokens) const {
  requireValidUtf8(text);
  Encoding enc;
  // 1. Tokens matched on the raw text; 2. normalization; 3. normalized added tokens.
  for (const auto& seg : p_.added.split(text, false)) {
    if (seg.id) {
      enc.ids.push_back(*seg.id);
      enc.tokens.push_back(*p_.added.idToToken(*seg.id));
      continue;
    }
    if (seg.end == seg.begin) continue;
    std::string part = text.substr(seg.begin, seg.end - seg.begin);
    if (p_.normalizer) part = p_.normalizer->normalize(part);
    for (const auto& sub : p_.added.split(part, true)) {
      if (sub.id) {
        enc.ids.push_back(*sub.id);
        enc.tokens.push_back(*p_.added.idToToken(*sub.id));
      } else if (sub.end > sub.begin) {
        encodePlain(part.substr(sub.begin, sub.end - sub.begin), seg.begin == 0 && sub.begin == 0, enc);
      }
    }
  }
  if (addSpecialTokens && p_.postProcessor) enc = p_.postProcessor->process(std::move(enc));
  return enc;
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids, bool skipSpecialTokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    if (skipSpecialTokens && p_.added.isSpecial(id)) continue;
    auto t = p_.added.idToToken(id);
    if (!t) t = p_.model->idToToken(id);
    if (t) tokens.push_back(std::move(*t));  // unknown ids are skipped, as in `tokenizers`
  }
  std::string text;
  if (p_.decoder) {
    text = p_.decoder->decode(std::move(tokens));
  } else {
    for (std::size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
  }
  if (p_.cleanUpTokenizationSpaces) {
    for (const auto& [from, to] : std::initializer_list<std::pair<const char*, const char*>>{
             {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
             {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}}) {
      replaceAll(text, from, to);
    }
  }
  return text;
}

int64_t HfTokenizer::vocabSize() const { return std::max(p_.model->maxId(), p_.added.maxId()) + 1; }

std::optional<std::string> HfTokenizer::idToToken(int64_t id) const {
  if (auto t = p_.added.idToToken(id)) return t;
  return p_.model->idToToken(id);
}

std::optional<int64_t> HfTokenizer::tokenToId(const std::string& token) const {
  if (auto id = p_.added.tokenToId(token)) return id;
  return p_.model->tokenToId(token);
}

}  // namespace kvscope::tok
