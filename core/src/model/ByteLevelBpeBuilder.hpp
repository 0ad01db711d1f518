// A deterministic byte-level BPE tokenizer for random-weight checkpoints, serialised as the
// HuggingFace `tokenizers` library writes tokenizer.json: the 256 GPT-2 byte tokens
// (bytes_to_unicode order), then merges learned from a built-in English text, then
// `<|endoftext|>` as a special added token with the last id.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kvscope {

class ByteLevelBpeBuilder {
 public:
  /// Learns vocabSize - 257 merges. Once the built-in text has no pair left to merge,
  /// further merges extend learned tokens by frequent letters (still valid BPE: both
  /// parts and the result are in the vocabulary). Throws std::invalid_argument when
  /// vocabSize < 257.
  explicit ByteLevelBpeBuilder(int64_t vocabSize);

  static const char* specialToken() { return "<|endoftext|>"; }
  /// The 256 base tokens: GPT-2's printable-unicode stand-in for each byte, in the order
  /// GPT-2's vocabulary numbers them (printable bytes first).
  static std::vector<std::string> byteAlphabet();
  /// The built-in English text the merges are learned from.
  static const char* trainingText();
  /// Splits text as the GPT-2 pre-tokenizer regex does (contractions, ` ?letters`,
  /// ` ?digits`, ` ?other`, whitespace).
  static std::vector<std::string> preTokenize(const std::string& text);
  /// UTF-8 bytes -> byte-level token alphabet string ("hello world" -> "helloĠworld").
  static std::string toByteLevel(const std::string& bytes);

  /// Every token in id order (base bytes, merges, then the special token).
  const std::vector<std::string>& tokens() const { return tokens_; }
  const std::vector<std::pair<std::string, std::string>>& merges() const { return merges_; }
  /// How many merges came from the training text (the rest are the letter fallback).
  size_t learnedFromText() const { return learnedFromText_; }
  /// The tokenizer.json document (keys in the order `tokenizers` writes them).
  nlohmann::ordered_json tokenizerJson() const;

 private:
  bool addToken(const std::string& t);
  void learnFromText(size_t target);
  void extendWithLetters(size_t target);

  std::vector<std::string> tokens_;
  std::map<std::string, int64_t> ids_;
  std::vector<std::pair<std::string, std::string>> merges_;
  size_t learnedFromText_ = 0;
};

}  // namespace kvscope
