// The model of a --model directory together with its tokenizer (when the directory has
// one), checked against each other before anything runs: audit stage 1's vocabulary
// check. Shared by the `reference` and `generate` subcommands.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvscope/Model.hpp"
#include "kvscope/Tokenizer.hpp"

namespace kvscope::cli {

class ModelSession {
 public:
  /// Loads the model, then the tokenizer if the directory holds one (tokenizer.json,
  /// vocab.json + merges.txt or tokenizer.model, in Tokenizer::loadFromDirectory's order).
  /// Throws InputError for a broken model or tokenizer, and — naming the tokenizer file and
  /// the config's vocab_size — when the tokenizer can produce ids the embedding lacks. An
  /// embedding with more rows than the tokenizer (padding rows) only adds a note.
  static ModelSession open(const std::string& dir, bool requireTokenizer);

  const std::shared_ptr<Model>& model() const { return model_; }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  /// The file the tokenizer was read from; empty without a tokenizer.
  const std::string& tokenizerFile() const { return tokenizerFile_; }
  /// Remarks worth showing the user (e.g. padding rows); never errors.
  const std::vector<std::string>& notes() const { return notes_; }

  /// Encodes with special tokens as the tokenizer's post-processor adds them. Throws
  /// UsageError without a tokenizer and for text that encodes to no tokens.
  Encoding encode(const std::string& text) const;
  /// The vocabulary's spelling of `id`, or nullopt (no tokenizer, or an unknown id).
  std::optional<std::string> tokenText(int64_t id) const;
  /// Checks ids against the embedding rows; UsageError naming `option` and the id.
  void checkIds(const std::vector<int64_t>& ids, const std::string& option) const;

 private:
  std::shared_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string tokenizerFile_;
  std::vector<std::string> notes_;
};

}  // namespace kvscope::cli
