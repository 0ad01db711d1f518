// Tokenizer loading errors, special-token handling and the `kvscope-cli tokenize` command.
// Expected values come from the fixtures (tests/fixtures/hf); malformed inputs are made by
// damaging copies of them.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "CliRunner.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/Tokenizer.hpp"
#include "tokenizer/SentencePieceModel.hpp"
#include "tokenizer/Utf8.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTokenizers = KVSCOPE_FIXTURES_DIR "/hf/tokenizers";
const std::string kTokenizerModels = KVSCOPE_FIXTURES_DIR "/hf/models";
const std::string kGolden = KVSCOPE_FIXTURES_DIR "/hf/golden";

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeFile(const fs::path& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out << data;
}

json readTokenizerJson(const std::string& path) { return json::parse(readFile(path)); }

// A fresh, empty directory per test.
fs::path scratchDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) /
                 (std::string("kvscope_tok_") + info->test_suite_name() + "_" + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Runs `load`, which must throw InputError; returns it for inspection.
template <typename Fn>
kvscope::InputError expectInputError(Fn load) {
  try {
    load();
  } catch (const kvscope::InputError& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got another exception: " << e.what();
    return kvscope::InputError("", "", "");
  }
  ADD_FAILURE() << "expected InputError, nothing was thrown";
  return kvscope::InputError("", "", "");
}

TEST(TokenizerErrors, TruncatedTokenizerJsonNamesFileAndLine) {
  const fs::path dir = scratchDir();
  const std::string full = readFile(kTokenizers + "/gpt2/tokenizer.json");
  const fs::path path = dir / "tokenizer.json";
  writeFile(path, full.substr(0, full.size() / 2));
  const auto e = expectInputError([&] { kvscope::Tokenizer::loadFile(path.string()); });
  EXPECT_EQ(e.file(), path.string());
  EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  EXPECT_NE(e.field().find("line"), std::string::npos) << e.what();
  // Through the directory too.
  const auto e2 = expectInputError([&] { kvscope::Tokenizer::loadFromDirectory(dir.string()); });
  EXPECT_EQ(e2.file(), path.string());
}

TEST(TokenizerErrors, MergeWithUnknownTokenInTokenizerJson) {
  const fs::path dir = scratchDir();
  json doc = readTokenizerJson(kTokenizers + "/gpt2/tokenizer.json");
  ASSERT_GT(doc["model"]["merges"].size(), 3u);
  doc["model"]["merges"][3] = json::array({"Ġ", "no-such-token-in-vocab"});
  const fs::path path = dir / "tokenizer.json";
  writeFile(path, doc.dump());
  const auto e = expectInputError([&] { kvscope::Tokenizer::loadFile(path.string()); });
  EXPECT_EQ(e.file(), path.string());
  EXPECT_EQ(e.field(), "model.merges[3]");
  EXPECT_NE(e.detail().find("no-such-token-in-vocab"), std::string::npos) << e.what();
}

TEST(TokenizerErrors, MergeWithUnknownTokenInMergesTxt) {
  const fs::path dir = scratchDir();
  fs::copy_file(kTokenizers + "/gpt2/vocab.json", dir / "vocab.json");
  std::istringstream merges(readFile(kTokenizers + "/gpt2/merges.txt"));
  std::string out, line;
  int lineNo = 0, badLine = 0;
  while (std::getline(merges, line)) {
    ++lineNo;
    out += line + "\n";
    if (lineNo == 4) {
      out += "zzz-unknown qqq-unknown\n";
      badLine = ++lineNo;
    }
  }
  writeFile(dir / "merges.txt", out);
  const auto e = expectInputError([&] { kvscope::Tokenizer::loadFromDirectory(dir.string()); });
  EXPECT_EQ(e.file(), (dir / "merges.txt").string());
  EXPECT_EQ(e.field(), "line " + std::to_string(badLine));
}

TEST(TokenizerErrors, UnsupportedModelTypeListsSupported) {
  const fs::path dir = scratchDir();
  json doc = readTokenizerJson(kTokenizers + "/gpt2/tokenizer.json");
  doc["model"]["type"] = "WordPiece";
  const fs::path path = dir / "tokenizer.json";
  writeFile(path, doc.dump());
  const auto e = expectInputError([&] { kvscope::Tokenizer::loadFile(path.string()); });
  EXPECT_EQ(e.file(), path.string());
  EXPECT_EQ(e.field(), "model.type");
  EXPECT_NE(e.detail().find("WordPiece"), std::string::npos) << e.what();
  EXPECT_NE(e.detail().find("BPE"), std::string::npos) << e.what();
}

TEST(TokenizerErrors, UnsupportedPreTokenizerNamesItsField) {
  const fs::path dir = scratchDir();
  json doc = readTokenizerJson(kTokenizers + "/llama3/tokenizer.json");
  doc["pre_tokenizer"]["pretokenizers"][1]["type"] = "UnicodeScripts";
  const fs::path path = dir / "tokenizer.json";
  writeFile(path, doc.dump());
  const auto e = expectInputError([&] { kvscope::Tokenizer::loadFile(path.string()); });
  EXPECT_EQ(e.field(), "pre_tokenizer.pretokenizers[1].type");
}

TEST(TokenizerErrors, BadSplitRegexNamesPattern) {
  const fs::path dir = scratchDir();
  json doc = readTokenizerJson(kTokenizers + "/llama3/tokenizer.json");
  doc["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  const fs::path path = dir / "tokenizer.json";
  writeFile(path, doc.dump());
  const auto e = expectInputError([&] { kvscope::Tokenizer::loadFile(path.string()); });
  EXPECT_EQ(e.field(), "pre_tokenizer.pretokenizers[0].pattern");
}

TEST(TokenizerErrors, TruncatedSentencePieceModel) {
  const fs::path dir = scratchDir();
  const std::string full = readFile(kTokenizers + "/spm/tokenizer.model");
  ASSERT_GT(full.size(), 16u);
  for (std::size_t keep : {std::size_t{5}, full.size() / 2 + 1, full.size() - 2}) {
    const fs::path path = dir / ("cut" + std::to_string(keep) + ".model");
    writeFile(path, full.substr(0, keep));
    const auto e = expectInputError([&] { kvscope::Tokenizer::loadFile(path.string()); });
    EXPECT_EQ(e.file(), path.string()) << "kept " << keep << " bytes";
    EXPECT_NE(std::string(e.what()).find("ModelProto"), std::string::npos) << e.what();
  }
}

TEST(TokenizerErrors, NotAProtobufModel) {
  const fs::path dir = scratchDir();
  const fs::path path = dir / "tokenizer.model";
  writeFile(path, std::string("\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF", 11));
  const auto e = expectInputError([&] { kvscope::Tokenizer::loadFromDirectory(dir.string()); });
  EXPECT_EQ(e.file(), path.string());
}

// A ModelProto written by hand: the fixture's pieces with model_type set to UNIGRAM.
TEST(TokenizerErrors, UnigramSentencePieceModelIsReportedAsUnsupported) {
  const fs::path dir = scratchDir();
  auto varint = [](uint64_t v) {
    std::string s;
    while (v >= 0x80) {
      s += static_cast<char>((v & 0x7F) | 0x80);
      v >>= 7;
    }
    return s + static_cast<char>(v);
  };
  auto lengthDelimited = [&](int field, const std::string& payload) {
    return varint(static_cast<uint64_t>(field) << 3 | 2) + varint(payload.size()) + payload;
  };
  std::string model;
  for (const char* p : {"<unk>", "<s>", "</s>", "a", "b"}) {
    model += lengthDelimited(1, lengthDelimited(1, p));
  }
  model += lengthDelimited(2, varint(3 << 3 | 0) + varint(1));  // trainer_spec.model_type = UNIGRAM
  const fs::path path = dir / "tokenizer.model";
  writeFile(path, model);
  const auto e = expectInputError([&] { kvscope::Tokenizer::loadFile(path.string()); });
  EXPECT_EQ(e.file(), path.string());
  EXPECT_NE(e.detail().find("unigram models are not supported"), std::string::npos) << e.what();
}

TEST(TokenizerErrors, DirectoryWithoutTokenizer) {
  const fs::path dir = scratchDir();
  writeFile(dir / "config.json", "{}");
  const auto e = expectInputError([&] { kvscope::Tokenizer::loadFromDirectory(dir.string()); });
  EXPECT_EQ(e.file(), dir.string());
  EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos);
  const auto missing = expectInputError([&] { kvscope::Tokenizer::loadFromDirectory((dir / "nope").string()); });
  EXPECT_EQ(missing.file(), (dir / "nope").string());
}

TEST(TokenizerErrors, InvalidUtf8TextIsAUsageError) {
  const auto tok = kvscope::Tokenizer::loadFile(kTokenizers + "/gpt2/tokenizer.json");
  EXPECT_THROW(tok->encode(std::string("ab\xC3", 3)), kvscope::UsageError);
}

// Merges written as "left right" strings (the older tokenizer.json form) give the same
// encodings as [left, right] pairs.
TEST(TokenizerFormats, MergesAsStringsEqualMergesAsPairs) {
  const fs::path dir = scratchDir();
  json doc = readTokenizerJson(kTokenizers + "/gpt2/tokenizer.json");
  json merges = json::array();
  for (const auto& m : doc["model"]["merges"]) {
    ASSERT_TRUE(m.is_array());
    merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  doc["model"]["merges"] = merges;
  writeFile(dir / "tokenizer.json", doc.dump());
  const auto tok = kvscope::Tokenizer::loadFromDirectory(dir.string());
  // The document outlives the loop (a range over a temporary's member reads freed memory).
  const json golden = readTokenizerJson(kTokenizers + "/gpt2/golden_encodings.json");
  ASSERT_FALSE(golden["cases"].empty());
  for (const auto& c : golden["cases"]) {
    EXPECT_EQ(tok->encode(c["text"].get<std::string>()).ids, c["ids"].get<std::vector<int64_t>>())
        << c["text"];
  }
}

// Pipelines that must behave exactly like the GPT-2 fixture's own: its regex as an explicit
// Split (kept as Isolated pieces, or as the complement removed with invert), wrapped in
// Sequences, with an NFC normalizer (the golden texts are NFC already).
TEST(TokenizerFormats, EquivalentGpt2PipelinesGiveGoldenEncodings) {
  const json original = readTokenizerJson(kTokenizers + "/gpt2/tokenizer.json");
  const std::string gpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  const json byteLevelNoRegex = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  std::vector<json> variants;
  for (const auto& [behavior, invert] : std::vector<std::pair<std::string, bool>>{{"Isolated", false}, {"Removed", true}}) {
    json doc = original;
    doc["pre_tokenizer"] = {{"type", "Sequence"},
                            {"pretokenizers",
                             json::array({{{"type", "Split"}, {"pattern", {{"Regex", gpt2Regex}}},
                                           {"behavior", behavior}, {"invert", invert}},
                                          byteLevelNoRegex})}};
    variants.push_back(doc);
  }
  json withNormalizer = original;
  withNormalizer["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}})}};
  withNormalizer["decoder"] = {{"type", "Sequence"}, {"decoders", json::array({original["decoder"]})}};
  variants.push_back(withNormalizer);

  const fs::path dir = scratchDir();
  const json golden = readTokenizerJson(kTokenizers + "/gpt2/golden_encodings.json");
  for (std::size_t v = 0; v < variants.size(); ++v) {
    const fs::path path = dir / ("variant" + std::to_string(v) + ".json");
    writeFile(path, variants[v].dump());
    const auto tok = kvscope::Tokenizer::loadFile(path.string());
    for (const auto& c : golden["cases"]) {
      const std::string text = c["text"].get<std::string>();
      const auto enc = tok->encode(text);
      EXPECT_EQ(enc.ids, c["ids"].get<std::vector<int64_t>>()) << "variant " << v << ": " << text;
      EXPECT_EQ(tok->decode(enc.ids), c["decoded"].get<std::string>()) << "variant " << v;
    }
  }
}

// The fixture's SentencePiece model converted the way transformers' LlamaConverter does it
// (vocab from the pieces, merges from every split of a piece into two pieces, ranked by the
// piece's score; Prepend + Replace normalizer; Replace/ByteFallback/Fuse/Strip decoder) must
// reproduce sentencepiece's golden encodings through the tokenizer.json pipeline.
TEST(TokenizerFormats, SentencePieceConvertedToTokenizerJsonMatchesGolden) {
  const auto model = kvscope::tok::SentencePieceModel::load(kTokenizers + "/spm/tokenizer.model");
  json vocab = json::object();
  json added = json::array();
  for (std::size_t i = 0; i < model.pieces.size(); ++i) {
    vocab[model.pieces[i].piece] = i;
    const int type = model.pieces[i].type;
    if (type == kvscope::tok::SentencePieceModel::kControl || type == kvscope::tok::SentencePieceModel::kUnknown) {
      added.push_back({{"id", i}, {"content", model.pieces[i].piece}, {"special", true}, {"normalized", false}});
    }
  }
  struct Merge {
    std::string left, right;
    float score;
  };
  std::vector<Merge> merges;
  for (const auto& p : model.pieces) {
    if (p.type != kvscope::tok::SentencePieceModel::kNormal) continue;
    std::vector<Merge> local;
    const auto chars = kvscope::tok::splitChars(p.piece);
    std::size_t cut = 0;
    for (std::size_t k = 0; k + 1 < chars.size(); ++k) {
      cut += chars[k].size();
      const std::string l = p.piece.substr(0, cut), r = p.piece.substr(cut);
      if (vocab.contains(l) && vocab.contains(r)) local.push_back({l, r, p.score});
    }
    std::stable_sort(local.begin(), local.end(), [&](const Merge& a, const Merge& b) {
      return std::make_pair(vocab[a.left].get<int>(), vocab[a.right].get<int>()) <
             std::make_pair(vocab[b.left].get<int>(), vocab[b.right].get<int>());
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.score > b.score; });
  json mergeList = json::array();
  for (const auto& m : merges) mergeList.push_back(json::array({m.left, m.right}));
  ASSERT_FALSE(mergeList.empty());

  const std::string kMetaspace = "\xE2\x96\x81";  // U+2581
  const std::string bos = model.pieces.at(static_cast<std::size_t>(model.bosId)).piece;
  const json doc = {
      {"added_tokens", added},
      // The layout of Llama-2's own tokenizer.json (transformers' legacy conversion): the
      // normalizer prepends U+2581 and replaces spaces, as SentencePiece's dummy prefix does.
      // A Metaspace pre-tokenizer would differ on text that starts with a space: the
      // tokenizers library prepends only when the text does not start with U+2581 already.
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", kMetaspace}},
                                     {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMetaspace}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{bos, {{"id", bos}, {"ids", {model.bosId}}, {"tokens", {bos}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", kMetaspace}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}},
                                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"}, {"unk_token", model.pieces.at(static_cast<std::size_t>(model.unkId)).piece},
        {"fuse_unk", true}, {"byte_fallback", model.byteFallback}, {"vocab", vocab}, {"merges", mergeList}}}};
  const fs::path dir = scratchDir();
  writeFile(dir / "tokenizer.json", doc.dump());
  const auto tok = kvscope::Tokenizer::loadFile((dir / "tokenizer.json").string());
  const json golden = readTokenizerJson(kTokenizers + "/spm/golden_encodings.json");
  ASSERT_FALSE(golden["cases"].empty());
  for (const auto& c : golden["cases"]) {
    const std::string input = c["text"].get<std::string>();
    const auto enc = tok->encode(input);
    EXPECT_EQ(enc.ids, c["ids"].get<std::vector<int64_t>>()) << input;
    EXPECT_EQ(enc.tokens, c["tokens"].get<std::vector<std::string>>()) << input;
    EXPECT_EQ(tok->decode(enc.ids, true), c["decoded"].get<std::string>()) << input;
  }
}

// Without special tokens the BOS the post-processor (or LlamaTokenizer) adds disappears and
// nothing else changes.
TEST(TokenizerSpecialTokens, NoSpecialDropsOnlyTheBos) {
  for (const std::string& dir : {kTokenizers + "/llama3", kTokenizers + "/spm"}) {
    const auto tok = dir.find("spm") != std::string::npos
                         ? kvscope::Tokenizer::loadFile(dir + "/tokenizer.model")
                         : kvscope::Tokenizer::loadFromDirectory(dir);
    const json golden = readTokenizerJson(dir + "/golden_encodings.json");
    ASSERT_FALSE(golden["cases"].empty());
    for (const auto& c : golden["cases"]) {
      auto want = c["ids"].get<std::vector<int64_t>>();
      ASSERT_FALSE(want.empty());
      const auto bos = tok->tokenToId(c["tokens"][0].get<std::string>());
      ASSERT_TRUE(bos.has_value());
      EXPECT_EQ(*bos, want.front());
      want.erase(want.begin());
      EXPECT_EQ(tok->encode(c["text"].get<std::string>(), false).ids, want) << dir << ": " << c["text"];
    }
  }
}

TEST(TokenizerSpecialTokens, SkipSpecialTokensOnDecode) {
  const auto tok = kvscope::Tokenizer::loadFile(kTokenizers + "/llama3/tokenizer.json");
  const json golden = readTokenizerJson(kTokenizers + "/llama3/golden_encodings.json");
  ASSERT_FALSE(golden["cases"].empty());
  for (const auto& c : golden["cases"]) {
    const auto ids = c["ids"].get<std::vector<int64_t>>();
    const std::string text = c["text"].get<std::string>();
    // The golden texts that spell special tokens keep them when decoded with skipping on;
    // only check the plain ones.
    if (text.find("<|") != std::string::npos) continue;
    EXPECT_EQ(tok->decode(ids, true), text);
  }
}

// --- kvscope-cli tokenize ---------------------------------------------------------------

using kvscope::test::CliRun;
using kvscope::test::runKvscopeCli;

TEST(TokenizerCli, JsonIdsMatchGolden) {
  const json golden = readTokenizerJson(kGolden + "/gpt2.json");
  ASSERT_FALSE(golden["prompts"].empty());
  for (const auto& prompt : golden["prompts"]) {
    const CliRun r = runKvscopeCli({"tokenize", "--model", kTokenizerModels + "/gpt2", "--text",
                                    prompt["text"].get<std::string>(), "--json"});
    ASSERT_EQ(r.exitCode, 0) << r.err;
    const json out = json::parse(r.out);
    EXPECT_EQ(out.at("ids").get<std::vector<int64_t>>(), prompt["ids"].get<std::vector<int64_t>>());
    EXPECT_EQ(out.at("tokens").size(), out.at("ids").size());
  }
}

TEST(TokenizerCli, NoSpecialOmitsBos) {
  const json golden = readTokenizerJson(kGolden + "/llama.json");
  const auto& prompt = golden["prompts"][0];
  const CliRun r = runKvscopeCli({"tokenize", "--model", kTokenizerModels + "/llama", "--text",
                                  prompt["text"].get<std::string>(), "--json", "--no-special"});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  auto want = prompt["ids"].get<std::vector<int64_t>>();
  want.erase(want.begin());
  EXPECT_EQ(json::parse(r.out).at("ids").get<std::vector<int64_t>>(), want);
}

TEST(TokenizerCli, TableListsEveryToken) {
  const json golden = readTokenizerJson(kGolden + "/gpt2.json");
  const auto& prompt = golden["prompts"][0];
  const CliRun r = runKvscopeCli({"tokenize", "--model", kTokenizerModels + "/gpt2", "--text",
                                  prompt["text"].get<std::string>()});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  for (const auto& id : prompt["ids"]) {
    EXPECT_NE(r.out.find(" " + std::to_string(id.get<int64_t>()) + "  '"), std::string::npos) << r.out;
  }
}

TEST(TokenizerCli, BadModelDirectoryExitsWithCode2) {
  const fs::path missing = scratchDir() / "no-such-model";
  const CliRun r = runKvscopeCli({"tokenize", "--model", missing.string(), "--text", "hello", "--json"});
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find(missing.string()), std::string::npos) << "stderr: " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

}  // namespace
