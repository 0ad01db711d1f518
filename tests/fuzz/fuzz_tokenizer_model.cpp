// tokenizer.model: the protobuf reader and the SentencePiece model built from it; an
// accepted model encodes and decodes a few fixed texts.
#include "FuzzSupport.hpp"
#include "kvscope/Tokenizer.hpp"

using namespace kvscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto dir = fuzz::scratch() / "tokenizer-model";
  std::filesystem::create_directories(dir);
  const auto path = dir / "tokenizer.model";
  fuzz::writeFile(path, data, size);
  fuzz::accepts([&] {
    auto tok = Tokenizer::loadFile(path.string());
    for (const char* text : {"Hello world", "  caf\xc3\xa9 12 \xe2\x96\x81 <s></s>\n", ""}) {
      const auto enc = tok->encode(text);
      (void)tok->decode(enc.ids);
      (void)tok->decode(enc.ids, true);
    }
    (void)tok->decode({0, 1, 2, tok->vocabSize() - 1, tok->vocabSize(), -1});
  });
  fuzz::expectUnchanged(path, data, size);
  return 0;
}
