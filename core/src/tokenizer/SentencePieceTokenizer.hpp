// SentencePiece BPE (`tokenizer.model`) as transformers' LlamaTokenizer (legacy=False) uses
// it: sentencepiece's normalizer and BPE merge order, byte fallback, BOS/EOS from
// tokenizer_config.json, special tokens in the text matched as whole tokens.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvscope/Tokenizer.hpp"
#include "tokenizer/AddedVocabulary.hpp"
#include "tokenizer/SentencePieceModel.hpp"

namespace kvscope::tok {

/// What transformers' LlamaTokenizer adds on top of the model file (tokenizer_config.json).
struct SentencePieceOptions {
  bool addBos = true;
  bool addEos = false;
  /// legacy=true: every text segment between special tokens gets the ▁ prefix;
  /// legacy=false: only the start of the text does.
  bool legacy = true;
  /// Overrides the model's add_dummy_prefix when set.
  std::optional<bool> addPrefixSpace;
  std::vector<AddedToken> extraTokens;
  /// Where the model came from, for description(): "tokenizer.model", "GGUF vocabulary".
  std::string source = "tokenizer.model";
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  /// Loads `path` (a tokenizer.model) and tokenizer_config.json beside it.
  static std::unique_ptr<SentencePieceTokenizer> load(const std::string& path);

  SentencePieceTokenizer(SentencePieceModel model, const std::string& file, SentencePieceOptions options);

  Encoding encode(const std::string& text, bool addSpecialTokens = true) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skipSpecialTokens = false) const override;
  int64_t vocabSize() const override;
  std::optional<std::string> idToToken(int64_t id) const override;
  std::optional<int64_t> tokenToId(const std::string& token) const override;
  std::string description() const override;

  /// sentencepiece's Normalizer::Normalize for this model (whitespace handling, ▁ escaping,
  /// dummy prefix when `addDummyPrefix`).
  std::string normalize(const std::string& text, bool addDummyPrefix) const;

 private:
  void encodeSegment(const std::string& text, bool first, Encoding& out) const;
  std::vector<std::string> bpe(const std::string& normalized) const;
  int64_t pieceToId(const std::string& piece) const;

  SentencePieceModel m_;
  std::string approxNormalization_;  // "", "NFKC" (documented approximation of nmt_nfkc)
  bool caseFold_ = false;
  SentencePieceOptions opt_;
  bool addPrefix_;  // the dummy prefix, from the model or add_prefix_space
  std::unordered_map<std::string, int64_t> pieces_;    // NORMAL, USER_DEFINED, UNUSED
  std::unordered_map<std::string, int64_t> reserved_;  // UNKNOWN, CONTROL, BYTE
  // user-defined pieces by first byte, longest first (matched before merging, never split)
  std::unordered_map<unsigned char, std::vector<std::string>> userDefined_;
  AddedVocabulary specials_;
};

}  // namespace kvscope::tok
