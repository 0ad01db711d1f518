// GGUF (llama.cpp's model files): the header, metadata values and arrays, tensor infos and
// offsets; then the HuggingFace view of it (architecture, config keys, tensor names),
// dequantising every tensor it accepts (up to 1M values), and its vocabulary
// (tokenizer.ggml.*) built and run on a text.
#include <vector>

#include "FuzzSupport.hpp"
#include "gguf/GgmlBlocks.hpp"
#include "gguf/GgufModelView.hpp"
#include "kvscope/GgufFile.hpp"
#include "kvscope/ModelConfig.hpp"
#include "tokenizer/GgufTokenizerLoader.hpp"

using namespace kvscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::scratch() / "input.gguf";
  fuzz::writeFile(path, data, size);
  fuzz::accepts([&] {
    auto f = GgufFile::open(path.string());
    std::vector<float> out;
    for (const auto& t : f->tensors()) {
      const detail::GgmlType* g = detail::ggmlType(t.type);
      if (!g || t.numel() > (1 << 20)) continue;
      out.resize(static_cast<size_t>(t.numel()));
      detail::ggmlDequantize(*g, f->bytes(t), t.numel(), out.data());
    }
    fuzz::accepts([&] {
      const auto tok = tok::GgufTokenizerLoader::load(*f);
      (void)tok->decode(tok->encode("Hello world, 123 ünï", true).ids);
    });
    const detail::GgufModelView view(f);
    (void)ModelConfig::fromJson(view.config(), path.string());
  });
  fuzz::expectUnchanged(path, data, size);
  return 0;
}
