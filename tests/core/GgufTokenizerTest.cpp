// Vocabularies from GGUF metadata (tests/fixtures/gguf/vocab, converted by llama.cpp's own
// convert_hf_to_gguf.py from the tokenizer fixtures: make_vocab_fixtures.py): KV Scope's
// tokenizer built from tokenizer.ggml.* encodes every text to exactly the ids llama.cpp's
// tokenizer gives (byte-level BPE with the gpt-2, llama-bpe, qwen2 and default pre-tokenizers;
// SentencePiece BPE with scores); a GGUF checkpoint without tokenizer files gets its own
// vocabulary; files without one or with an unknown pre-tokenizer are refused by key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "TestSupport.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/GgufFile.hpp"
#include "kvscope/Tokenizer.hpp"

using namespace kvscope;

namespace {

std::string vocabFixture(const std::string& name) { return test::fixture("gguf/vocab/" + name); }

nlohmann::json goldens() {
  std::ifstream in(vocabFixture("goldens.json"));
  return nlohmann::json::parse(in);
}

class GgufVocabulary : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufVocabulary, EncodesAsLlamaCppDoes) {
  const std::string file = GetParam() + ".gguf";
  const auto tok = Tokenizer::loadFromDirectory(vocabFixture(file));
  EXPECT_NE(tok->description().find("GGUF vocabulary"), std::string::npos) << tok->description();
  const auto g = goldens();
  int checked = 0;
  for (const auto& text : g["texts"]) {
    const std::string t = text.get<std::string>();
    SCOPED_TRACE(t);
    const auto want = g["files"][file][t].get<std::vector<int64_t>>();
    EXPECT_EQ(tok->encode(t, true).ids, want);
    ++checked;
  }
  EXPECT_EQ(checked, 10);
}

INSTANTIATE_TEST_SUITE_P(LlamaCppConverted, GgufVocabulary,
                         ::testing::Values("gpt2", "llama3", "qwen2", "default", "spm"),
                         [](const auto& p) { return p.param; });

TEST(GgufVocabulary, CheckpointsWithoutTokenizerFilesUseTheirOwn) {
  // A folder holding the .gguf alone: its vocabulary too.
  const auto dir = std::filesystem::temp_directory_path() / "kvscope-gguf-vocab-folder";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(vocabFixture("qwen2.gguf"), dir / "model.gguf");
  const auto g = goldens();
  EXPECT_EQ(Tokenizer::loadFromDirectory(dir.string())->encode("Hello world", true).ids,
            g["files"]["qwen2.gguf"]["Hello world"].get<std::vector<int64_t>>());
  const auto file = GgufFile::open((dir / "model.gguf").string());
  EXPECT_EQ(Tokenizer::loadFile((dir / "model.gguf").string())->vocabSize(),
            static_cast<int64_t>(file->find("tokenizer.ggml.tokens")->items.size()));
  std::filesystem::remove_all(dir);
}

TEST(GgufVocabulary, FilesWithoutOneOrWithAnUnknownPreTokenizerAreRefusedByKey) {
  try {
    Tokenizer::loadFromDirectory(test::fixture("gguf/blocks.gguf"));  // tensors only
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "tokenizer.ggml.model") << e.what();
  }
  // The llama3 file with its pre-tokenizer renamed (same length, so the offsets hold).
  std::ifstream in(vocabFixture("llama3.gguf"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto at = bytes.find("llama-bpe");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 9, "llama-xyz");
  const auto path = std::filesystem::temp_directory_path() / "kvscope-unknown-pre.gguf";
  std::ofstream(path, std::ios::binary) << bytes;
  try {
    Tokenizer::loadFromDirectory(path.string());
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "tokenizer.ggml.pre") << e.what();
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
