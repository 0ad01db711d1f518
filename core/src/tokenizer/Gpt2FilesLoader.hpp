// Builds an HfTokenizer from GPT-2 style vocab.json + merges.txt (+ tokenizer_config.json):
// byte-level BPE with the GPT-2 split regex and ByteLevel decoding.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/HfTokenizer.hpp"

namespace kvscope::tok {

class Gpt2FilesLoader {
 public:
  /// `vocabPath` names vocab.json; merges.txt and tokenizer_config.json are read from the
  /// same folder.
  static std::unique_ptr<HfTokenizer> load(const std::string& vocabPath);
};

}  // namespace kvscope::tok
