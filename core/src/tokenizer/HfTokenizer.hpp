// A HuggingFace `tokenizers` pipeline: added tokens -> normalizer -> pre-tokenizer -> BPE
// model -> post-processor, and ids -> tokens -> decoder for the way back.
#pragma once

#include <memory>
#include <string>

#include "kvscope/Tokenizer.hpp"
#include "tokenizer/AddedVocabulary.hpp"
#include "tokenizer/BpeModel.hpp"
#include "tokenizer/Decoders.hpp"
#include "tokenizer/Normalizers.hpp"
#include "tokenizer/PostProcessors.hpp"
#include "tokenizer/PreTokenizers.hpp"

namespace kvscope::tok {

struct HfPipeline {
  std::unique_ptr<Normalizer> normalizer;      // may be null
  std::unique_ptr<PreTokenizer> preTokenizer;  // may be null
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<PostProcessor> postProcessor;  // may be null
  std::unique_ptr<Decoder> decoder;              // may be null: tokens joined with spaces
  AddedVocabulary added;
  bool cleanUpTokenizationSpaces = false;  // transformers' decode-time clean-up
  std::string description;
};

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(HfPipeline pipeline);

  Encoding encode(const std::string& text, bool addSpecialTokens = true) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skipSpecialTokens = false) const override;
  int64_t vocabSize() const override;
  std::optional<std::string> idToToken(int64_t id) const override;
  std::optional<int64_t> tokenToId(const std::string& token) const override;
  std::string description() const override { return p_.description; }

 private:
  void encodePlain(const std::string& text, bool atStart, Encoding& out) const;
  HfPipeline p_;
};

}  // namespace kvscope::tok
