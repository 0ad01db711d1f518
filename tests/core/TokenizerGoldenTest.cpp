// Every golden encoding the reference HuggingFace stack computed for the fixture tokenizers
// must come out of our tokenizers id for id, token for token, and decode back the same.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvscope/Error.hpp"
#include "kvscope/Tokenizer.hpp"

namespace {

using nlohmann::json;

const std::string kFixtures = KVSCOPE_FIXTURES_DIR "/hf";

struct TokenizerCase {
  std::string label;       // test-name friendly
  std::string tokenizer;   // file (or directory) to load
  bool fromDirectory = false;
  std::string goldenFile;  // where the expectation comes from
  std::size_t caseIndex = 0;
  std::string casesKey;    // "cases" or "prompts"
  bool decodeSkipsSpecial = false;
};

json readGoldenJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return json::parse(in);
}

// One parameter per (tokenizer, golden case), so a failure names the exact case.
std::vector<TokenizerCase> tokenizerCases() {
  struct Source {
    std::string name, tokenizer, golden, key;
    bool dir, skipSpecial;
  };
  const std::string t = kFixtures + "/tokenizers/";
  // The spm golden was decoded by sentencepiece, which drops control symbols such as <s>;
  // the HF goldens were decoded with special tokens kept.
  const std::vector<Source> sources = {
      {"gpt2_tokenizer_json", t + "gpt2/tokenizer.json", t + "gpt2/golden_encodings.json", "cases", false, false},
      {"gpt2_vocab_merges", t + "gpt2/vocab.json", t + "gpt2/golden_encodings.json", "cases", false, false},
      {"gpt2_directory", t + "gpt2", t + "gpt2/golden_encodings.json", "cases", true, false},
      {"llama3_tokenizer_json", t + "llama3/tokenizer.json", t + "llama3/golden_encodings.json", "cases", false, false},
      {"gemma_tokenizer_json", t + "gemma/tokenizer.json", t + "gemma/golden_encodings.json", "cases", false, false},
      {"qwen2_tokenizer_json", t + "qwen2/tokenizer.json", t + "qwen2/golden_encodings.json", "cases", false, false},
      {"o200k_tokenizer_json", t + "o200k/tokenizer.json", t + "o200k/golden_encodings.json", "cases", false, false},
      {"spm_model", t + "spm/tokenizer.model", t + "spm/golden_encodings.json", "cases", false, true},
      {"spm_fast_json", t + "spm/tokenizer.json", t + "spm/golden_encodings_fast.json", "cases", false, false},
      {"model_gpt2", kFixtures + "/models/gpt2", kFixtures + "/golden/gpt2.json", "prompts", true, false},
      {"model_llama", kFixtures + "/models/llama", kFixtures + "/golden/llama.json", "prompts", true, false},
  };
  std::vector<TokenizerCase> out;
  for (const auto& s : sources) {
    std::size_t n = 0;
    try {
      n = readGoldenJson(s.golden).at(s.key).size();
    } catch (const std::exception&) {
      n = 1;  // the test itself reports the unreadable golden file
    }
    for (std::size_t i = 0; i < n; ++i) {
      out.push_back({s.name + "_" + std::to_string(i), s.tokenizer, s.dir, s.golden, i, s.key, s.skipSpecial});
    }
  }
  return out;
}

std::string show(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20) out += "\\x" + std::to_string(c);
    else out += static_cast<char>(c);
  }
  return out;
}

// Side-by-side table of expected and actual ids/tokens, marking rows that differ.
std::string diffTable(const std::vector<int64_t>& wantIds, const std::vector<std::string>& wantTokens,
                      const kvscope::Encoding& got) {
  std::ostringstream os;
  os << "  #   expected                 actual\n";
  const std::size_t n = std::max(wantIds.size(), got.ids.size());
  for (std::size_t i = 0; i < n; ++i) {
    std::ostringstream w, g;
    if (i < wantIds.size()) w << wantIds[i] << " '" << (i < wantTokens.size() ? show(wantTokens[i]) : "") << "'";
    if (i < got.ids.size()) g << got.ids[i] << " '" << (i < got.tokens.size() ? show(got.tokens[i]) : "") << "'";
    const bool same = w.str() == g.str();
    os << (same ? "   " : ">> ") << i << "\t" << w.str() << std::string(w.str().size() < 24 ? 24 - w.str().size() : 1, ' ')
       << g.str() << "\n";
  }
  return os.str();
}

class TokenizerGolden : public ::testing::TestWithParam<TokenizerCase> {};

TEST_P(TokenizerGolden, EncodesAndDecodesLikeTransformers) {
  const TokenizerCase& c = GetParam();
  const json golden = readGoldenJson(c.goldenFile);
  ASSERT_TRUE(golden.contains(c.casesKey)) << c.goldenFile << " has no '" << c.casesKey << "'";
  ASSERT_LT(c.caseIndex, golden[c.casesKey].size());
  const json& g = golden[c.casesKey][c.caseIndex];
  const std::string text = g.at("text").get<std::string>();
  const auto wantIds = g.at("ids").get<std::vector<int64_t>>();
  const auto wantTokens = g.value("tokens", std::vector<std::string>{});

  std::unique_ptr<kvscope::Tokenizer> tok;
  try {
    tok = c.fromDirectory ? kvscope::Tokenizer::loadFromDirectory(c.tokenizer)
                          : kvscope::Tokenizer::loadFile(c.tokenizer);
  } catch (const std::exception& e) {
    FAIL() << "loading " << c.tokenizer << " failed: " << e.what();
  }
  const kvscope::Encoding got = tok->encode(text, true);
  SCOPED_TRACE("text: \"" + show(text) + "\" with " + tok->description());
  const bool idsMatch = got.ids == wantIds;
  const bool tokensMatch = !g.contains("tokens") || got.tokens == wantTokens;
  EXPECT_TRUE(idsMatch && tokensMatch) << diffTable(wantIds, wantTokens, got);
  EXPECT_EQ(got.ids.size(), got.tokens.size());

  if (g.contains("decoded")) {
    const std::string decoded = tok->decode(wantIds, c.decodeSkipsSpecial);
    EXPECT_EQ(show(decoded), show(g["decoded"].get<std::string>()));
  }
  // Each token string maps back to its id.
  for (std::size_t i = 0; i < got.ids.size() && i < got.tokens.size(); ++i) {
    EXPECT_EQ(tok->idToToken(got.ids[i]).value_or("<none>"), got.tokens[i]);
    EXPECT_LT(got.ids[i], tok->vocabSize());
  }
}

INSTANTIATE_TEST_SUITE_P(TokenizerFixtures, TokenizerGolden, ::testing::ValuesIn(tokenizerCases()),
                         [](const ::testing::TestParamInfo<TokenizerCase>& info) {
                           return info.param.label;
                         });

}  // namespace
