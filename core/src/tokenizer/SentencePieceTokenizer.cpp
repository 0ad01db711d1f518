#include "tokenizer/SentencePieceTokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <queue>

#include "kvscope/Error.hpp"
#include "tokenizer/Decoders.hpp"
#include "tokenizer/Normalizers.hpp"
#include "tokenizer/TokenizerConfig.hpp"
#include "tokenizer/Utf8.hpp"

namespace kvscope::tok {

namespace {
const std::string kSpaceSymbol = "\xE2\x96\x81";  // U+2581

std::string bytePiece(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", static_cast<unsigned>(b));
  return buf;
}
}  // namespace

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& path) {
  SentencePieceModel model = SentencePieceModel::load(path);
  const auto dir = std::filesystem::path(path).parent_path().string();
  const TokenizerConfig cfg = TokenizerConfig::load(dir.empty() ? "." : dir);
  // LlamaTokenizer defaults: BOS added, EOS not, legacy unless the config says otherwise.
  SentencePieceOptions opt;
  opt.addBos = cfg.addBosToken.value_or(true);
  opt.addEos = cfg.addEosToken.value_or(false);
  opt.legacy = cfg.legacy.value_or(true);
  opt.addPrefixSpace = cfg.addPrefixSpace;
  opt.extraTokens = cfg.addedTokensDecoder;
  return std::make_unique<SentencePieceTokenizer>(std::move(model), path, std::move(opt));
}

SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceModel model, const std::string& file,
                                               SentencePieceOptions options)
    : m_(std::move(model)), opt_(std::move(options)) {
  addPrefix_ = opt_.addPrefixSpace.value_or(m_.addDummyPrefix);
  if (m_.modelType != SentencePieceModel::kBpe) {
    const std::string kind = m_.modelType == SentencePieceModel::kUnigram ? "unigram"
                             : m_.modelType == SentencePieceModel::kWord  ? "word"
                             : m_.modelType == SentencePieceModel::kChar  ? "char"
                                                                          : "type " + std::to_string(m_.modelType);
    throw InputError(file, "ModelProto.trainer_spec.model_type",
                     "SentencePiece " + kind + " models are not supported yet (supported: BPE)");
  }
  const std::string& name = m_.normalizerName;
  if (name == "nfkc" || name == "nmt_nfkc" || name == "nfkc_cf" || name == "nmt_nfkc_cf") {
    // Approximation: the precompiled charsmap of these rules is NFKC (plus, for nmt_*, a few
    // control-character removals) and, for *_cf, case folding. utf8proc's NFKC stands in.
    approxNormalization_ = "NFKC";
    caseFold_ = name.size() > 3 && name.compare(name.size() - 3, 3, "_cf") == 0;
  } else if (!(name.empty() || name == "identity") && !m_.precompiledCharsmap.empty()) {
    throw InputError(file, "ModelProto.normalizer_spec.name",
                     "normalization rule '" + name +
                         "' is not supported (supported: identity, nfkc, nmt_nfkc, nfkc_cf, nmt_nfkc_cf)");
  }
  for (std::size_t i = 0; i < m_.pieces.size(); ++i) {
    const auto& p = m_.pieces[i];
    const bool normal = p.type == SentencePieceModel::kNormal || p.type == SentencePieceModel::kUserDefined ||
                        p.type == SentencePieceModel::kUnused;
    auto& map = normal ? pieces_ : reserved_;
    if (!map.emplace(p.piece, static_cast<int64_t>(i)).second) {
      throw InputError(file, "ModelProto.pieces[" + std::to_string(i) + "]",
                       "piece '" + p.piece + "' is defined twice");
    }
    if (p.type == SentencePieceModel::kUserDefined) {
      userDefined_[static_cast<unsigned char>(p.piece[0])].push_back(p.piece);
    }
    if (p.type == SentencePieceModel::kControl || p.type == SentencePieceModel::kUnknown) {
      AddedToken t;
      t.id = static_cast<int64_t>(i);
      t.content = p.piece;
      t.special = true;
      specials_.add(t);
    }
  }
  for (auto& [b, list] : userDefined_) {
    std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& c) { return a.size() > c.size(); });
  }
  for (const auto& t : opt_.extraTokens) specials_.add(t);
  specials_.finalize(nullptr);
}

std::string SentencePieceTokenizer::description() const {
  std::string d = opt_.source + " (SentencePiece BPE";
  if (m_.byteFallback) d += ", byte fallback";
  if (!approxNormalization_.empty()) d += ", " + m_.normalizerName + " approximated by " + approxNormalization_;
  return d + ")";
}

std::string SentencePieceTokenizer::normalize(const std::string& input, bool addDummyPrefix) const {
  std::string text = input;
  if (!approxNormalization_.empty()) text = unicodeNormalize(text, approxNormalization_);
  if (caseFold_) {
    static const std::unique_ptr<Normalizer> lower =
        makeNormalizer(JsonFields(""), Json{{"type", "Lowercase"}}, "");
    text = lower->normalize(text);
  }
  std::string_view in(text);
  const bool removeExtra = m_.removeExtraWhitespaces;
  if (removeExtra) {
    while (!in.empty() && in.front() == ' ') in.remove_prefix(1);
  }
  std::string out;
  if (in.empty()) return out;
  const std::string space = m_.escapeWhitespaces ? kSpaceSymbol : " ";
  const bool prefix = addDummyPrefix && addPrefix_;
  if (prefix && !m_.treatWhitespaceAsSuffix) out += space;
  bool prevSpace = removeExtra;
  for (char c : in) {
    if (c == ' ') {
      if (prevSpace) continue;  // only reachable with remove_extra_whitespaces
      out += space;
      prevSpace = removeExtra;
    } else {
      out += c;
      prevSpace = false;
    }
  }
  if (removeExtra) {
    while (out.size() >= space.size() && out.compare(out.size() - space.size(), space.size(), space) == 0) {
      out.resize(out.size() - space.size());
    }
  }
  if (prefix && m_.treatWhitespaceAsSuffix) out += space;
  return out;
}

int64_t SentencePieceTokenizer::pieceToId(const std::string& piece) const {
  if (auto it = reserved_.find(piece); it != reserved_.end()) return it->second;
  if (auto it = pieces_.find(piece); it != pieces_.end()) return it->second;
  return m_.unkId;
}

std::vector<std::string> SentencePieceTokenizer::bpe(const std::string& normalized) const {
  struct Symbol {
    long prev, next;
    bool freeze;
    std::size_t begin, len;
  };
  struct Pair {
    float score;
    long left, right;
    std::size_t size;
  };
  // Highest score first; on ties the leftmost pair.
  struct Order {
    bool operator()(const Pair& a, const Pair& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };

  std::vector<Symbol> symbols;
  std::size_t pos = 0;
  while (pos < normalized.size()) {
    std::size_t len = charLength(normalized, pos);
    bool freeze = false;
    if (auto it = userDefined_.find(static_cast<unsigned char>(normalized[pos])); it != userDefined_.end()) {
      for (const auto& u : it->second) {
        if (normalized.compare(pos, u.size(), u) == 0) {
          len = u.size();
          freeze = true;
          break;
        }
      }
    }
    const long idx = static_cast<long>(symbols.size());
    symbols.push_back({idx - 1, -1, freeze, pos, len});
    if (idx > 0) symbols[idx - 1].next = idx;
    pos += len;
  }
  if (symbols.empty()) return {};

  std::priority_queue<Pair, std::vector<Pair>, Order> agenda;
  std::unordered_map<std::string, std::pair<std::string, std::string>> revMerge;
  auto piece = [&](long i) { return normalized.substr(symbols[i].begin, symbols[i].len); };
  auto maybeAdd = [&](long left, long right) {
    if (left < 0 || right < 0 || symbols[left].freeze || symbols[right].freeze) return;
    const std::string merged = normalized.substr(symbols[left].begin, symbols[left].len + symbols[right].len);
    auto it = pieces_.find(merged);
    if (it == pieces_.end()) return;
    const auto& sp = m_.pieces[static_cast<std::size_t>(it->second)];
    agenda.push({sp.score, left, right, merged.size()});
    if (sp.type == SentencePieceModel::kUnused) revMerge[merged] = {piece(left), piece(right)};
  };
  for (std::size_t i = 1; i < symbols.size(); ++i) maybeAdd(static_cast<long>(i - 1), static_cast<long>(i));

  while (!agenda.empty()) {
    const Pair top = agenda.top();
    agenda.pop();
    Symbol& l = symbols[top.left];
    Symbol& r = symbols[top.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != top.size) continue;  // stale
    l.len += r.len;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = top.left;
    r.len = 0;
    maybeAdd(l.prev, top.left);
    maybeAdd(top.left, l.next);
  }

  std::vector<std::string> out;
  std::function<void(const std::string&)> resegment = [&](const std::string& w) {
    auto it = pieces_.find(w);
    if (it != pieces_.end() && m_.pieces[static_cast<std::size_t>(it->second)].type == SentencePieceModel::kUnused) {
      auto rm = revMerge.find(w);
      if (rm != revMerge.end()) {
        const auto parts = rm->second;
        resegment(parts.first);
        resegment(parts.second);
        return;
      }
    }
    out.push_back(w);
  };
  for (long i = 0; i != -1; i = symbols[i].next) resegment(piece(i));
  return out;
}

void SentencePieceTokenizer::encodeSegment(const std::string& text, bool first, Encoding& out) const {
  bool prevUnk = false;
  for (const std::string& w : bpe(normalize(text, first))) {
    const int64_t id = pieceToId(w);
    const bool unk = id == m_.unkId;
    if (unk && m_.byteFallback) {
      for (char c : w) {
        const std::string bp = bytePiece(static_cast<unsigned char>(c));
        out.ids.push_back(pieceToId(bp));
        out.tokens.push_back(*idToToken(out.ids.back()));
      }
      prevUnk = false;
      continue;
    }
    if (unk && prevUnk) continue;  // a run of unknown pieces becomes one <unk>
    out.ids.push_back(id);
    out.tokens.push_back(*idToToken(id));
    prevUnk = unk;
  }
}

Encoding SentencePieceTokenizer::encode(const std::string& text, bool addSpecialTokens) const {
  requireValidUtf8(text);
  Encoding enc;
  if (addSpecialTokens && opt_.addBos && m_.bosId >= 0) {
    enc.ids.push_back(m_.bosId);
    enc.tokens.push_back(m_.pieces[static_cast<std::size_t>(m_.bosId)].piece);
  }
  // Special tokens written in the text are whole tokens. With legacy=False only the text's
  // start gets the dummy prefix; legacy=True gives it to every segment.
  for (const auto& seg : specials_.split(text, false)) {
    if (seg.id) {
      enc.ids.push_back(*seg.id);
      enc.tokens.push_back(*idToToken(*seg.id));
    } else if (seg.end > seg.begin) {
      encodeSegment(text.substr(seg.begin, seg.end - seg.begin), opt_.legacy || seg.begin == 0, enc);
    }
  }
  if (addSpecialTokens && opt_.addEos && m_.eosId >= 0) {
    enc.ids.push_back(m_.eosId);
    enc.tokens.push_back(m_.pieces[static_cast<std::size_t>(m_.eosId)].piece);
  }
  return enc;
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids, bool skipSpecialTokens) const {
  std::vector<std::string> tokens;
  for (int64_t id : ids) {
    if (skipSpecialTokens && specials_.isSpecial(id)) continue;
    if (auto t = idToToken(id)) tokens.push_back(std::move(*t));
  }
  // The decoder transformers' converter gives Llama: ▁ -> space, byte pieces re-assembled,
  // then one leading space (the dummy prefix) removed.
  static const Json spec = {
      {"type", "Sequence"},
      {"decoders",
       {{{"type", "Replace"}, {"pattern", {{"String", kSpaceSymbol}}}, {"content", " "}},
        {{"type", "ByteFallback"}},
        {{"type", "Fuse"}}}}};
  static const std::unique_ptr<Decoder> decoder = makeDecoder(JsonFields(""), spec, "decoder");
  std::string text = decoder->decode(std::move(tokens));
  if (addPrefix_ && !text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

int64_t SentencePieceTokenizer::vocabSize() const {
  return std::max<int64_t>(static_cast<int64_t>(m_.pieces.size()), specials_.maxId() + 1);
}

std::optional<std::string> SentencePieceTokenizer::idToToken(int64_t id) const {
  if (id >= 0 && static_cast<std::size_t>(id) < m_.pieces.size()) return m_.pieces[static_cast<std::size_t>(id)].piece;
  return specials_.idToToken(id);
}

std::optional<int64_t> SentencePieceTokenizer::tokenToId(const std::string& token) const {
  if (auto it = reserved_.find(token); it != reserved_.end()) return it->second;
  if (auto it = pieces_.find(token); it != pieces_.end()) return it->second;
  return specials_.tokenToId(token);
}

}  // namespace kvscope::tok
