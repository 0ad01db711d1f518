// Tokenizer::loadFromDirectory / loadFile: picks the loader for the files present.
#include <filesystem>
#include <fstream>

#include "kvscope/Error.hpp"
#include "kvscope/Tokenizer.hpp"
#include "kvscope/GgufFile.hpp"
#include "tokenizer/GgufTokenizerLoader.hpp"
#include "tokenizer/Gpt2FilesLoader.hpp"
#include "tokenizer/HfJsonLoader.hpp"
#include "tokenizer/SentencePieceTokenizer.hpp"

namespace kvscope {

namespace fs = std::filesystem;

namespace {
bool isGgufFile(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return false;
  std::ifstream in(p, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string(magic, 4) == "GGUF";
}
}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::loadFromDirectory(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw InputError(dir, "", "no such directory");
  // A GGUF checkpoint is a file: its own vocabulary (tokenizer.ggml.*).
  if (isGgufFile(dir)) return tok::GgufTokenizerLoader::load(*GgufFile::open(dir));
  if (!fs::is_directory(dir, ec)) throw InputError(dir, "", "not a directory (expected a model folder)");
  const fs::path d(dir);
  if (fs::exists(d / "tokenizer.json")) return tok::HfJsonLoader::load((d / "tokenizer.json").string());
  if (fs::exists(d / "vocab.json") && fs::exists(d / "merges.txt")) {
    return tok::Gpt2FilesLoader::load((d / "vocab.json").string());
  }
  if (fs::exists(d / "tokenizer.model")) {
    return tok::SentencePieceTokenizer::load((d / "tokenizer.model").string());
  }
  // A folder holding one GGUF file and no tokenizer files: the file's vocabulary.
  std::vector<fs::path> ggufs;
  for (const auto& e : fs::directory_iterator(d, ec))
    if (e.path().extension() == ".gguf" && isGgufFile(e.path())) ggufs.push_back(e.path());
  if (ggufs.size() == 1) return tok::GgufTokenizerLoader::load(*GgufFile::open(ggufs.front().string()));
  throw InputError(dir, "",
                   "no tokenizer found: expected tokenizer.json, vocab.json + merges.txt, "
                   "tokenizer.model, or one GGUF file (its vocabulary)");
}

std::unique_ptr<Tokenizer> Tokenizer::loadFile(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw InputError(path, "", "no such file");
  const fs::path p(path);
  if (isGgufFile(p)) return tok::GgufTokenizerLoader::load(*GgufFile::open(path));
  if (p.extension() == ".model") return tok::SentencePieceTokenizer::load(path);
  if (p.filename() == "vocab.json") return tok::Gpt2FilesLoader::load(path);
  if (p.filename() == "merges.txt") return tok::Gpt2FilesLoader::load((p.parent_path() / "vocab.json").string());
  if (p.extension() == ".json") return tok::HfJsonLoader::load(path);
  // Unknown name: JSON starts with '{', a SentencePiece model is binary protobuf.
  std::ifstream in(path, std::ios::binary);
  char c = 0;
  while (in.get(c) && (c == ' ' || c == '\n' || c == '\r' || c == '\t')) {
  }
  if (in && c == '{') return tok::HfJsonLoader::load(path);
  return tok::SentencePieceTokenizer::load(path);
}

}  // namespace kvscope
