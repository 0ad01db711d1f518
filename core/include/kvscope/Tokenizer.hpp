// Tokenizers researchers actually ship: HuggingFace `tokenizer.json` (BPE), GPT-2 style
// `vocab.json` + `merges.txt`, and SentencePiece `tokenizer.model`.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvscope {

struct Encoding {
  std::vector<int64_t> ids;
  std::vector<std::string> tokens;  // token strings as the vocabulary spells them
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// Encodes `text`; with `addSpecialTokens` the post-processor's BOS/EOS/template applies
  /// (what `tokenizer(text)` does in transformers).
  virtual Encoding encode(const std::string& text, bool addSpecialTokens = true) const = 0;
  /// Decodes ids back to text (special tokens kept unless `skipSpecialTokens`).
  virtual std::string decode(const std::vector<int64_t>& ids,
                             bool skipSpecialTokens = false) const = 0;
  /// Number of ids the tokenizer can produce (max id + 1, added tokens included).
  virtual int64_t vocabSize() const = 0;
  /// Token string for an id, or nullopt when the id is unknown.
  virtual std::optional<std::string> idToToken(int64_t id) const = 0;
  virtual std::optional<int64_t> tokenToId(const std::string& token) const = 0;
  /// What was loaded, e.g. "tokenizer.json (BPE, byte-level)".
  virtual std::string description() const = 0;

  /// Loads the tokenizer of a model directory, preferring tokenizer.json, then
  /// vocab.json + merges.txt, then tokenizer.model. Throws InputError naming the file and
  /// field on malformed input, or naming the directory when none is present.
  static std::unique_ptr<Tokenizer> loadFromDirectory(const std::string& dir);
  /// Loads one file: a tokenizer.json, a tokenizer.model, or a vocab.json (merges.txt is
  /// then read from the same folder).
  static std::unique_ptr<Tokenizer> loadFile(const std::string& path);
};

}  // namespace kvscope
