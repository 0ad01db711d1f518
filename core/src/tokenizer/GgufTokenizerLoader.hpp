// The vocabulary a GGUF file carries (`tokenizer.ggml.*`), built into the tokenizer llama.cpp
// runs with it (src/llama-vocab.cpp), for a GGUF checkpoint given without tokenizer.json:
//
//   tokenizer.ggml.model "gpt2"   byte-level BPE: tokens, merges, and the pre-tokenizer's
//                                 split expressions llama.cpp uses for tokenizer.ggml.pre
//                                 (default, llama-bpe and its kin with ignore_merges, gpt-2,
//                                 qwen2, qwen35, smollm, ...), applied one after the other
//   tokenizer.ggml.model "llama"  SentencePiece BPE: tokens with scores and types (the same
//                                 numbering as sentencepiece's), byte fallback, the space
//                                 prefix of tokenizer.ggml.add_space_prefix
//
// BOS / EOS follow tokenizer.ggml.add_bos_token / add_eos_token and the token ids; control
// and user-defined tokens are matched whole in the text (as transformers does). Refused,
// naming the file and the key: another tokenizer model (WordPiece, Unigram, RWKV), a
// pre-tokenizer KV Scope does not know (give the tokenizer.json beside the file instead),
// arrays of different lengths, a merge that is not "left right".
#pragma once

#include <memory>

#include "kvscope/GgufFile.hpp"
#include "kvscope/Tokenizer.hpp"

namespace kvscope::tok {

class GgufTokenizerLoader {
 public:
  static std::unique_ptr<Tokenizer> load(const GgufFile& file);
};

}  // namespace kvscope::tok
