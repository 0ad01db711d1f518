#include "tokenizer/Gpt2FilesLoader.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "kvscope/Error.hpp"
#include "tokenizer/HfJsonLoader.hpp"
#include "tokenizer/TokenizerConfig.hpp"

namespace kvscope::tok {

std::unique_ptr<HfTokenizer> Gpt2FilesLoader::load(const std::string& vocabPath) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(vocabPath).parent_path();
  const std::string mergesPath = (dir / "merges.txt").string();

  const JsonFields jf(vocabPath);
  const Json vocab = JsonFields::parseFile(vocabPath);
  jf.requireObject(vocab, "");
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      jf.fail(token, "expected a non-negative integer token id");
    }
  }

  std::ifstream in(mergesPath, std::ios::binary);
  if (!in) throw InputError(mergesPath, "", "cannot open file (vocab.json needs merges.txt beside it)");
  Json merges = Json::array();
  std::vector<std::size_t> lineOfMerge;
  std::string line;
  std::size_t lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const std::size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string::npos) {
      throw InputError(mergesPath, "line " + std::to_string(lineNo),
                       "expected two tokens separated by one space, found \"" + line + "\"");
    }
    merges.push_back(Json::array({line.substr(0, sp), line.substr(sp + 1)}));
    lineOfMerge.push_back(lineNo);
  }

  const TokenizerConfig cfg = TokenizerConfig::load(dir.empty() ? "." : dir.string());

  Json root = Json::object();
  root["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", std::move(merges)}};
  root["pre_tokenizer"] = {{"type", "ByteLevel"},
                           {"add_prefix_space", cfg.addPrefixSpace.value_or(false)},
                           {"use_regex", true}};
  root["decoder"] = {{"type", "ByteLevel"}};

  // Special tokens: those tokenizer_config.json names, and <|endoftext|> (GPT-2's default).
  Json added = Json::array();
  std::vector<std::string> seen;
  for (const auto& t : cfg.addedTokensDecoder) {
    added.push_back({{"id", t.id}, {"content", t.content}, {"single_word", t.singleWord},
                     {"lstrip", t.lstrip}, {"rstrip", t.rstrip}, {"normalized", t.normalized},
                     {"special", t.special}});
    seen.push_back(t.content);
  }
  std::vector<std::string> specials = cfg.specialTokens();
  specials.emplace_back("<|endoftext|>");
  for (const auto& s : specials) {
    if (std::find(seen.begin(), seen.end(), s) != seen.end() || !vocab.contains(s)) continue;
    added.push_back({{"id", vocab[s]}, {"content", s}, {"normalized", false}, {"special", true}});
    seen.push_back(s);
  }
  root["added_tokens"] = std::move(added);

  // GPT2Tokenizer adds no BOS/EOS unless tokenizer_config.json asks for it.
  Json single = Json::array();
  Json specialMap = Json::object();
  auto addSpecial = [&](const std::optional<std::string>& tok, const std::string& key) {
    if (!tok || !vocab.contains(*tok)) {
      throw InputError((dir / "tokenizer_config.json").string(), key,
                       "is true but the token is not in " + vocabPath);
    }
    single.push_back({{"SpecialToken", {{"id", *tok}, {"type_id", 0}}}});
    specialMap[*tok] = {{"id", *tok}, {"ids", {vocab[*tok]}}, {"tokens", {*tok}}};
  };
  const bool bos = cfg.addBosToken.value_or(false), eos = cfg.addEosToken.value_or(false);
  if (bos) addSpecial(cfg.bosToken ? cfg.bosToken : std::optional<std::string>("<|endoftext|>"), "add_bos_token");
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (eos) addSpecial(cfg.eosToken ? cfg.eosToken : std::optional<std::string>("<|endoftext|>"), "add_eos_token");
  if (bos || eos) {
    root["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single},
                              {"special_tokens", specialMap}};
  }

  const BpeModel::MergeError onBadMerge = [&](std::size_t i, const std::string& detail) {
    throw InputError(mergesPath, "line " + std::to_string(lineOfMerge.at(i)), detail);
  };
  HfPipeline p = HfJsonLoader::build(jf, root, &onBadMerge);
  p.description = "vocab.json + merges.txt (BPE, byte-level)";
  p.cleanUpTokenizationSpaces = cfg.cleanUpTokenizationSpaces.value_or(false);
  return std::make_unique<HfTokenizer>(std::move(p));
}

}  // namespace kvscope::tok
