// HuggingFace decoders (tokenizer.json "decoder"): ByteLevel, Metaspace, Replace,
// ByteFallback, Fuse, Strip, BPEDecoder, Sequence. Each maps the token strings to new
// strings (`decode_chain`); the results are concatenated at the end.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/JsonFields.hpp"

namespace kvscope::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decodeChain(std::vector<std::string> tokens) const = 0;
  std::string decode(std::vector<std::string> tokens) const;
};

std::unique_ptr<Decoder> makeDecoder(const JsonFields& jf, const Json& spec, const std::string& path);
std::unique_ptr<Decoder> makeByteLevelDecoder();

}  // namespace kvscope::tok
