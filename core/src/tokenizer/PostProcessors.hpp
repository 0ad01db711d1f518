// HuggingFace post-processors (tokenizer.json "post_processor"), single-sequence form:
// TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel (no-op for ids), Sequence.
#pragma once

#include <memory>
#include <string>

#include "kvscope/Tokenizer.hpp"
#include "tokenizer/JsonFields.hpp"

namespace kvscope::tok {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  /// Adds the special tokens around one encoded sequence.
  virtual Encoding process(Encoding encoding) const = 0;
};

std::unique_ptr<PostProcessor> makePostProcessor(const JsonFields& jf, const Json& spec,
                                                 const std::string& path);

}  // namespace kvscope::tok
