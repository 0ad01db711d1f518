// HuggingFace pre-tokenizers (tokenizer.json "pre_tokenizer"): ByteLevel, Split, Metaspace,
// Whitespace, WhitespaceSplit, Digits, Punctuation, BertPreTokenizer, CharDelimiterSplit,
// Sequence. They cut the normalized text into words that the model encodes one at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/JsonFields.hpp"

namespace kvscope::tok {

struct PreToken {
  std::string text;
  /// True when the piece starts at offset 0 of the original text (Metaspace "first").
  bool atStart = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Replaces `pieces` by their splits; empty pieces are dropped.
  virtual void preTokenize(std::vector<PreToken>& pieces) const = 0;
};

std::unique_ptr<PreTokenizer> makePreTokenizer(const JsonFields& jf, const Json& spec,
                                               const std::string& path);

/// GPT-2's ByteLevel pre-tokenizer (regex split + byte mapping), used for vocab.json files.
std::unique_ptr<PreTokenizer> makeByteLevelPreTokenizer(bool addPrefixSpace, bool useRegex);

/// The regex GPT-2 splits words with.
extern const char* const kGpt2SplitPattern;

}  // namespace kvscope::tok
