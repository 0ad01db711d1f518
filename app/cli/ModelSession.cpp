#include "ModelSession.hpp"

#include <filesystem>

#include "kvscope/Error.hpp"

namespace kvscope::cli {

namespace fs = std::filesystem;

namespace {

// The file Tokenizer::loadFromDirectory reads, in its order of preference; empty if none.
std::string tokenizerFileIn(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / "tokenizer.json", ec)) return (dir / "tokenizer.json").string();
  if (fs::exists(dir / "vocab.json", ec) && fs::exists(dir / "merges.txt", ec))
    return (dir / "vocab.json").string();
  if (fs::exists(dir / "tokenizer.model", ec)) return (dir / "tokenizer.model").string();
  return {};
}

}  // namespace

ModelSession ModelSession::open(const std::string& dir, bool requireTokenizer) {
  ModelSession s;
  s.model_ = Model::load(dir);
  s.tokenizerFile_ = tokenizerFileIn(fs::path(dir));
  if (s.tokenizerFile_.empty()) {
    if (requireTokenizer)
      throw InputError(dir, "",
                       "no tokenizer found (expected tokenizer.json, vocab.json + merges.txt or "
                       "tokenizer.model) to encode the prompt; pass --ids instead where the "
                       "command accepts it");
    return s;
  }
  s.tokenizer_ = Tokenizer::loadFromDirectory(dir);

  const ModelConfig& cfg = s.model_->config();
  const int64_t tokenizerIds = s.tokenizer_->vocabSize();
  const int64_t rows = s.model_->embeddingRows();
  if (tokenizerIds > rows) {
    throw InputError(
        s.tokenizerFile_, "vocabulary",
        "the tokenizer produces ids up to " + std::to_string(tokenizerIds - 1) + " (" +
            std::to_string(tokenizerIds) + " ids) but the model's embedding has only " +
            std::to_string(rows) + " rows (" + cfg.sourceFile + ": vocab_size " +
            std::to_string(cfg.vocabSize) + "); the tokenizer does not belong to these weights");
  }
  if (rows > tokenizerIds) {
    s.notes_.push_back("the embedding has " + std::to_string(rows) + " rows and the tokenizer " +
                       std::to_string(tokenizerIds) + " ids: rows " + std::to_string(tokenizerIds) +
                       ".." + std::to_string(rows - 1) +
                       " are padding no text encodes to (config vocab_size " +
                       std::to_string(cfg.vocabSize) + ")");
  }
  return s;
}

Encoding ModelSession::encode(const std::string& text) const {
  if (!tokenizer_)
    throw UsageError("the model directory has no tokenizer to encode the prompt; pass --ids");
  Encoding enc = tokenizer_->encode(text, /*addSpecialTokens=*/true);
  if (enc.ids.empty()) throw UsageError("the prompt '" + text + "' encodes to no tokens");
  return enc;
}

std::optional<std::string> ModelSession::tokenText(int64_t id) const {
  if (!tokenizer_) return std::nullopt;
  return tokenizer_->idToToken(id);
}

void ModelSession::checkIds(const std::vector<int64_t>& ids, const std::string& option) const {
  const int64_t rows = model_->embeddingRows();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= rows)
      throw UsageError(option + ": token id " + std::to_string(ids[i]) + " (entry " +
                       std::to_string(i) + ") is outside the model's embedding, which has " +
                       std::to_string(rows) + " rows (ids 0.." + std::to_string(rows - 1) + ")");
  }
}

}  // namespace kvscope::cli
