// Added tokens (tokenizer.json "added_tokens", special tokens of tokenizer_config.json):
// found inside the text before pre-tokenization, leftmost-longest, honouring lstrip,
// rstrip and single_word; they always encode to their own id.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvscope::tok {

class Normalizer;

struct AddedToken {
  int64_t id = 0;
  std::string content;
  bool singleWord = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

class AddedVocabulary {
 public:
  struct Segment {
    std::size_t begin = 0;
    std::size_t end = 0;
    std::optional<int64_t> id;  // set when the segment is an added token
  };

  /// Adds a token; a second token with the same content replaces the first.
  void add(const AddedToken& token);
  /// Builds the matchers; normalized tokens are matched in their normalized spelling.
  void finalize(const Normalizer* normalizer);

  /// Cuts `text` into plain segments and added-token segments. `normalizedSet` selects the
  /// tokens with normalized=true (matched after normalization) instead of the others.
  std::vector<Segment> split(const std::string& text, bool normalizedSet) const;

  bool empty() const { return tokens_.empty(); }
  std::optional<std::string> idToToken(int64_t id) const;
  std::optional<int64_t> tokenToId(const std::string& content) const;
  bool isSpecial(int64_t id) const;
  int64_t maxId() const;

 private:
  struct Matcher {
    // first byte -> (pattern, token index), longest pattern first
    std::unordered_map<unsigned char, std::vector<std::pair<std::string, std::size_t>>> byFirstByte;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, std::size_t> byContent_;
  std::unordered_map<int64_t, std::size_t> byId_;
  Matcher raw_;
  Matcher normalized_;
};

}  // namespace kvscope::tok
