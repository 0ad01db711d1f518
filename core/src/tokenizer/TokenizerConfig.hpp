// The parts of transformers' tokenizer_config.json (and special_tokens_map.json) that change
// what ids a tokenizer produces: special tokens, add_bos/eos_token, add_prefix_space.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tokenizer/AddedVocabulary.hpp"
#include "tokenizer/JsonFields.hpp"

namespace kvscope::tok {

struct TokenizerConfig {
  bool present = false;  // tokenizer_config.json exists
  std::optional<bool> addBosToken;
  std::optional<bool> addEosToken;
  std::optional<bool> addPrefixSpace;
  std::optional<bool> cleanUpTokenizationSpaces;
  std::optional<bool> legacy;  // LlamaTokenizer: prefix ▁ after special tokens too
  std::optional<std::string> bosToken;
  std::optional<std::string> eosToken;
  std::optional<std::string> unkToken;
  std::optional<std::string> padToken;
  std::vector<std::string> additionalSpecialTokens;
  /// "added_tokens_decoder": id -> token settings.
  std::vector<AddedToken> addedTokensDecoder;

  /// Reads `dir`/tokenizer_config.json and `dir`/special_tokens_map.json when present; a
  /// malformed file is an InputError naming it.
  static TokenizerConfig load(const std::string& dir);
  /// bos, eos, unk, pad and the additional special tokens, in that order, without duplicates.
  std::vector<std::string> specialTokens() const;
};

/// The settings of one serialized AddedToken, as tokenizer.json "added_tokens" entries and
/// tokenizer_config.json "added_tokens_decoder" values both hold them: content,
/// single_word, lstrip, rstrip, special and normalized (default: not special). The id is
/// the caller's. Errors name `path` inside `jf`'s file.
void readAddedTokenSettings(const JsonFields& jf, const Json& obj, const std::string& path, AddedToken& t);

}  // namespace kvscope::tok
