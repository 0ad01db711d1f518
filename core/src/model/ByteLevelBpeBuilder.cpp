#include "model/ByteLevelBpeBuilder.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <stdexcept>

namespace kvscope {

namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes
// to U+0100 onwards. Returns (byte, code point) pairs in vocabulary order.
std::vector<std::pair<int, uint32_t>> byteOrder() {
  std::vector<std::pair<int, uint32_t>> out;
  std::vector<bool> printable(256, false);
  for (int b = '!'; b <= '~'; ++b) printable[static_cast<size_t>(b)] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[static_cast<size_t>(b)] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[static_cast<size_t>(b)] = true;
  for (int b = 0; b < 256; ++b)
    if (printable[static_cast<size_t>(b)]) out.emplace_back(b, static_cast<uint32_t>(b));
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b)
    if (!printable[static_cast<size_t>(b)]) out.emplace_back(b, 256 + n++);
  return out;
}

const std::vector<std::string>& byteToToken() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    for (const auto& [b, cp] : byteOrder()) t[static_cast<size_t>(b)] = utf8(cp);
    return t;
  }();
  return table;
}

// Written for this project; plain English with contractions, digits and punctuation so
// the learned merges look like a real tokenizer's.
const char* const kText =
    "The lighthouse keeper woke before the sun, as he had every morning for thirty-one "
    "years. He climbed the 117 steps of the tower, counted them out loud, and wiped the "
    "salt from the great lens with a soft cloth. It's a small job, he'd tell visitors, but "
    "somebody has to do it. The ships that passed the point at night never knew his name; "
    "they only saw the light turning, steady and patient, every twelve seconds.\n"
    "In the afternoons he worked in the garden behind the cottage. Potatoes, onions and "
    "beans grew there in long straight rows, and a line of sunflowers leaned against the "
    "wall where the wind could not reach them. When the weather turned, he read: old "
    "sea charts, letters from his sister in the city, and books about the stars. He kept "
    "a notebook of everything he noticed, the temperature, the height of the tide, the "
    "birds that rested on the rocks, and the number of boats that came home safely.\n"
    "One winter evening a storm arrived faster than anyone had predicted. The radio "
    "crackled with warnings, the windows rattled, and the rain came sideways across the "
    "island. At 9:40 the power failed. The keeper didn't hesitate. He lit the backup "
    "lamp, wound the old clockwork by hand, and stayed beside it until morning, turning "
    "the crank whenever the weights ran low. Later, the crew of a fishing boat wrote to "
    "thank him; they'd seen the light through the spray and found their way into the "
    "harbour. He pinned the letter above his desk, next to the first page of the "
    "notebook, and went back to work.";

struct Regex {
  pcre2_code* code = nullptr;
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

}  // namespace

std::vector<std::string> ByteLevelBpeBuilder::byteAlphabet() {
  std::vector<std::string> out;
  for (const auto& [b, cp] : byteOrder()) out.push_back(utf8(cp));
  return out;
}

const char* ByteLevelBpeBuilder::trainingText() { return kText; }

std::string ByteLevelBpeBuilder::toByteLevel(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) out += byteToToken()[c];
  return out;
}

std::vector<std::string> ByteLevelBpeBuilder::preTokenize(const std::string& text) {
  static const char* pattern =
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
  Regex re;
  int err = 0;
  PCRE2_SIZE errOffset = 0;
  re.code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP, &err, &errOffset, nullptr);
  if (!re.code) throw std::logic_error("GPT-2 pre-tokenizer regex failed to compile");
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(re.code, nullptr), pcre2_match_data_free);
  std::vector<std::string> out;
  size_t offset = 0;
  while (offset < text.size()) {
    const int rc = pcre2_match(re.code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                               offset, 0, md.get(), nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    if (ov[1] == ov[0]) {  // cannot happen with this pattern; avoid looping forever
      ++offset;
      continue;
    }
    out.push_back(text.substr(ov[0], ov[1] - ov[0]));
    offset = ov[1];
  }
  return out;
}

bool ByteLevelBpeBuilder::addToken(const std::string& t) {
  if (ids_.count(t)) return false;
  ids_[t] = static_cast<int64_t>(tokens_.size());
  tokens_.push_back(t);
  return true;
}

ByteLevelBpeBuilder::ByteLevelBpeBuilder(int64_t vocabSize) {
  if (vocabSize < 257)
    throw std::invalid_argument("byte-level BPE needs a vocabulary of at least 257 tokens");
  for (const auto& t : byteAlphabet()) addToken(t);
  const size_t target = static_cast<size_t>(vocabSize) - 257;
  learnFromText(target);
  learnedFromText_ = merges_.size();
  extendWithLetters(target);
  tokens_.push_back(specialToken());
}

void ByteLevelBpeBuilder::learnFromText(size_t target) {
  // Word frequencies of the pre-tokenized text, each word as a list of symbols.
  std::map<std::string, int64_t> counts;
  for (const auto& w : preTokenize(kText)) ++counts[toByteLevel(w)];
  struct Word {
    std::vector<std::string> symbols;
    int64_t count;
  };
  std::vector<Word> words;
  for (const auto& [w, n] : counts) {
    Word word{{}, n};
    for (unsigned char c : w) {
      // Split the byte-level string back into its (1-2 byte UTF-8) characters.
      if ((c & 0xC0) == 0x80 && !word.symbols.empty())
        word.symbols.back().push_back(static_cast<char>(c));
      else
        word.symbols.emplace_back(1, static_cast<char>(c));
    }
    words.push_back(std::move(word));
  }
  while (merges_.size() < target) {
    std::map<std::pair<std::string, std::string>, int64_t> pairs;
    for (const auto& w : words)
      for (size_t i = 0; i + 1 < w.symbols.size(); ++i)
        pairs[{w.symbols[i], w.symbols[i + 1]}] += w.count;
    if (pairs.empty()) return;
    // Highest count wins; ties go to the lexicographically smallest pair (map order).
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (it->second > best->second) best = it;
    const auto [a, b] = best->first;
    const std::string merged = a + b;
    for (auto& w : words) {
      std::vector<std::string> next;
      for (size_t i = 0; i < w.symbols.size(); ++i) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == a && w.symbols[i + 1] == b) {
          next.push_back(merged);
          ++i;
        } else {
          next.push_back(w.symbols[i]);
        }
      }
      w.symbols = std::move(next);
    }
    // A pair that spells a token another merge already made is applied to the text but
    // not recorded, so every merge adds exactly one vocabulary entry.
    if (addToken(merged)) merges_.emplace_back(a, b);
  }
}

void ByteLevelBpeBuilder::extendWithLetters(size_t target) {
  static const char* letters = "etaoinshrdlcumwfgypbvkjxqz";
  // Walk learned tokens in id order (the list grows as we go) and append letters.
  size_t i = 256;
  while (merges_.size() < target) {
    if (i >= tokens_.size()) i = 0;  // only when the text taught nothing: start at bytes
    const std::string base = tokens_[i++];
    for (const char* l = letters; *l && merges_.size() < target; ++l) {
      const std::string letter(1, *l);
      if (addToken(base + letter)) merges_.emplace_back(base, letter);
    }
  }
}

nlohmann::ordered_json ByteLevelBpeBuilder::tokenizerJson() const {
  using oj = nlohmann::ordered_json;
  const auto byteLevel = [](bool addPrefixSpace, bool trimOffsets) {
    oj o = oj::object();
    o["type"] = "ByteLevel";
    o["add_prefix_space"] = addPrefixSpace;
    o["trim_offsets"] = trimOffsets;
    o["use_regex"] = true;
    return o;
  };
  oj doc = oj::object();
  doc["version"] = "1.0";
  doc["truncation"] = nullptr;
  doc["padding"] = nullptr;
  oj special = oj::object();
  special["id"] = static_cast<int64_t>(tokens_.size()) - 1;
  special["content"] = specialToken();
  special["single_word"] = false;
  special["lstrip"] = false;
  special["rstrip"] = false;
  special["normalized"] = false;
  special["special"] = true;
  doc["added_tokens"] = oj::array({special});
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] = byteLevel(false, true);
  doc["post_processor"] = byteLevel(true, false);
  doc["decoder"] = byteLevel(true, true);
  oj model = oj::object();
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = false;
  oj vocab = oj::object();
  for (size_t id = 0; id < tokens_.size(); ++id) vocab[tokens_[id]] = static_cast<int64_t>(id);
  model["vocab"] = std::move(vocab);
  oj merges = oj::array();
  for (const auto& [a, b] : merges_) merges.push_back(oj::array({a, b}));
  model["merges"] = std::move(merges);
  doc["model"] = std::move(model);
  return doc;
}

}  // namespace kvscope
