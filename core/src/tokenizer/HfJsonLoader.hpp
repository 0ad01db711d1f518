// Builds an HfTokenizer from a HuggingFace tokenizer.json (BPE models).
#pragma once

#include <memory>
#include <string>

#include "tokenizer/HfTokenizer.hpp"
#include "tokenizer/JsonFields.hpp"

namespace kvscope::tok {

class HfJsonLoader {
 public:
  /// Loads `path` (a tokenizer.json); tokenizer_config.json beside it is read for the
  /// decode-time clean-up flag. Malformed input is an InputError naming file and field.
  static std::unique_ptr<HfTokenizer> load(const std::string& path);

  /// Builds the pipeline from a parsed tokenizer.json document. `onBadMerge`, when given,
  /// reports merge errors instead of the default "model.merges[i]" field.
  static HfPipeline build(const JsonFields& jf, const Json& root,
                          const BpeModel::MergeError* onBadMerge = nullptr);
};

}  // namespace kvscope::tok
