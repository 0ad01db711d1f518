// tokenizer.json: the whole HuggingFace pipeline (model, added tokens, normalizers,
// pre-tokenizers, post-processors, decoders); an accepted tokenizer encodes and decodes a
// few fixed texts.
#include "FuzzSupport.hpp"
#include "kvscope/Tokenizer.hpp"

using namespace kvscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto dir = fuzz::scratch() / "tokenizer-json";
  std::filesystem::create_directories(dir);
  const auto path = dir / "tokenizer.json";
  fuzz::writeFile(path, data, size);
  fuzz::accepts([&] {
    auto tok = Tokenizer::loadFile(path.string());
    for (const char* text :
         {"Hello world", " it's  12345 caf\xc3\xa9 \xe2\x96\x81x\n\t<|endoftext|>", ""}) {
      const auto enc = tok->encode(text);
      (void)tok->decode(enc.ids);
      (void)tok->decode(enc.ids, true);
    }
    (void)tok->decode({0, 1, 2, tok->vocabSize() - 1, tok->vocabSize(), -1});
  });
  fuzz::expectUnchanged(path, data, size);
  return 0;
}
