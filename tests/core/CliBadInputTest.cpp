// `kvscope-cli reference` on broken model directories: every failure is exit code 2 with a
// stderr message naming the file and the field, never a crash, and the user's files are
// left byte for byte as they were.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "CliRunner.hpp"
#include "ScratchCheckpoint.hpp"

using namespace kvscope;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* kTag = "cli-bad-input";

std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      files[fs::relative(e.path(), dir).string()] = test::readBytes(e.path().string());
  return files;
}

std::string goodCheckpoint(const std::string& name, int64_t vocab = 300) {
  CheckpointSpec spec = test::smallSpec();
  spec.vocabSize = vocab;
  return test::writeScratchCheckpoint(kTag, name, spec);
}

// Runs `reference` on `dir` and checks the failure contract: exit 2 (no signal), nothing
// on stdout, stderr names every string in `mentions`, and no file in `dir` changed.
void expectRejected(const std::string& dir, const std::vector<std::string>& mentions,
                    const std::vector<std::string>& extraArgs = {"--ids", "1,2,3"}) {
  const auto before = snapshot(dir);
  std::vector<std::string> args = {"reference", "--model", dir};
  args.insert(args.end(), extraArgs.begin(), extraArgs.end());
  const test::CliRun r = test::runKvscopeCli(args);
  EXPECT_EQ(r.signal, 0) << r;
  EXPECT_EQ(r.exitCode, 2) << r;
  EXPECT_TRUE(r.out.empty()) << r;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r;
  for (const auto& m : mentions)
    EXPECT_NE(r.err.find(m), std::string::npos) << "'" << m << "' in\n" << r;
  EXPECT_TRUE(snapshot(dir) == before) << "files in " << dir << " changed";
}

std::string weights(const std::string& dir) { return dir + "/model.safetensors"; }

}  // namespace

TEST(CliBadInput, GoodCheckpointRunsForContrast) {
  const std::string dir = goodCheckpoint("good");
  const test::CliRun r =
      test::runKvscopeCli({"reference", "--model", dir, "--ids", "1,2,3", "--json"});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  EXPECT_EQ(json::parse(r.out).at("ids"), json({1, 2, 3}));
}

TEST(CliBadInput, TruncatedWeightFile) {
  const std::string dir = goodCheckpoint("truncated");
  const std::string bytes = test::readBytes(weights(dir));
  test::writeBytes(weights(dir), bytes.substr(0, bytes.size() / 2));
  expectRejected(dir, {weights(dir), "data_offsets", "beyond the data buffer"});
}

TEST(CliBadInput, WeightFileShorterThanItsHeaderLength) {
  const std::string dir = goodCheckpoint("truncated-to-4");
  test::writeBytes(weights(dir), test::readBytes(weights(dir)).substr(0, 4));
  expectRejected(dir, {weights(dir), "field 'header length'"});
}

TEST(CliBadInput, HeaderLengthBeyondTheFile) {
  const std::string dir = goodCheckpoint("header-length");
  std::string bytes = test::readBytes(weights(dir));
  const uint64_t huge = bytes.size() + 1000;
  std::memcpy(bytes.data(), &huge, 8);
  test::writeBytes(weights(dir), bytes);
  expectRejected(dir, {weights(dir), "field 'header length'", "truncated"});
}

TEST(CliBadInput, OverlappingOffsets) {
  const std::string dir = goodCheckpoint("overlap");
  test::editSafetensorsHeader(weights(dir), [](json& h) {
    // Two [H] float tensors: the second now claims the first one's bytes.
    h["model.layers.0.post_attention_layernorm.weight"]["data_offsets"] =
        h["model.layers.0.input_layernorm.weight"]["data_offsets"];
  });
  expectRejected(dir, {weights(dir), "layernorm.weight.data_offsets", "overlaps"});
}

TEST(CliBadInput, OutOfRangeOffsets) {
  const std::string dir = goodCheckpoint("out-of-range");
  test::editSafetensorsHeader(weights(dir), [](json& h) {
    uint64_t bufferEnd = 0;
    for (auto it = h.begin(); it != h.end(); ++it)
      if (it.key() != "__metadata__")
        bufferEnd = std::max(bufferEnd, it.value()["data_offsets"][1].get<uint64_t>());
    auto& off = h["model.norm.weight"]["data_offsets"];
    const uint64_t size = off[1].get<uint64_t>() - off[0].get<uint64_t>();
    off = json::array({bufferEnd, bufferEnd + size});
  });
  expectRejected(dir, {weights(dir), "field 'model.norm.weight.data_offsets'", "beyond"});
}

TEST(CliBadInput, UnknownDtype) {
  const std::string dir = goodCheckpoint("dtype");
  test::editSafetensorsHeader(
      weights(dir), [](json& h) { h["model.layers.1.mlp.up_proj.weight"]["dtype"] = "F12"; });
  expectRejected(dir, {weights(dir), "field 'model.layers.1.mlp.up_proj.weight.dtype'", "F12"});
}

TEST(CliBadInput, MissingTensor) {
  const std::string dir = goodCheckpoint("missing-tensor");
  const std::string gone = "model.layers.1.self_attn.k_proj.weight";
  test::rewriteTensors(dir, [&](const std::string& n, FloatTensor&) { return n != gone; });
  expectRejected(dir, {weights(dir), "field '" + gone + "'", "missing tensor"});
}

TEST(CliBadInput, ConfigHiddenSizeDisagreesWithTheTensors) {
  const std::string dir = goodCheckpoint("wrong-shape");
  json cfg = json::parse(test::readBytes(dir + "/config.json"));
  cfg["hidden_size"] = 48;  // the tensors are 32 wide
  test::writeBytes(dir + "/config.json", cfg.dump(2));
  expectRejected(
      dir, {weights(dir), "field 'model.embed_tokens.weight'", "shape", dir + "/config.json"});
}

TEST(CliBadInput, ConfigMissingARequiredField) {
  const std::string dir = goodCheckpoint("config-field");
  json cfg = json::parse(test::readBytes(dir + "/config.json"));
  cfg.erase("num_hidden_layers");
  test::writeBytes(dir + "/config.json", cfg.dump(2));
  expectRejected(dir, {dir + "/config.json", "num_hidden_layers"});
}

TEST(CliBadInput, ConfigLayerCountBeyondTheWeights) {
  // Sizing anything by a wrong count (here a billion layers) must not run out of memory.
  for (const char* count : {"3", "1000000000"}) {
    const std::string dir = goodCheckpoint(std::string("layers-") + count);
    json cfg = json::parse(test::readBytes(dir + "/config.json"));
    cfg["num_hidden_layers"] = std::stoll(count);
    test::writeBytes(dir + "/config.json", cfg.dump(2));
    // A count the weights lack names the missing tensor; one beyond the limit is refused
    // before anything is sized by it (docs/limits.md).
    expectRejected(dir,
                   {dir + "/config.json", "field 'num_hidden_layers'",
                    std::string(count) == "3" ? "model.layers.2" : "exceeds the limit of 1024"});
  }
}

TEST(CliBadInput, ConfigRopeValuesThatWouldGiveNaN) {
  const std::string dir = goodCheckpoint("rope-theta");
  json cfg = json::parse(test::readBytes(dir + "/config.json"));
  cfg["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", -1.0}};
  test::writeBytes(dir + "/config.json", cfg.dump(2));
  expectRejected(dir, {dir + "/config.json", "field 'rope_parameters.rope_theta'"});

  cfg["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 10000.0},
                            {"factor", 2.0},           {"low_freq_factor", 2.0},
                            {"high_freq_factor", 2.0}, {"original_max_position_embeddings", 16}};
  test::writeBytes(dir + "/config.json", cfg.dump(2));
  expectRejected(dir, {dir + "/config.json", "field 'rope_parameters.high_freq_factor'"});
}

TEST(CliBadInput, ConfigThatIsNotJson) {
  const std::string dir = goodCheckpoint("config-json");
  test::writeBytes(dir + "/config.json", "{\"model_type\": \"llama\", ");
  expectRejected(dir, {dir + "/config.json"});
}

TEST(CliBadInput, TokenizerVocabularyLargerThanTheEmbedding) {
  const std::string dir = goodCheckpoint("big-tokenizer", 300);
  const std::string other = goodCheckpoint("big-tokenizer-source", 400);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(other + "/" + f, dir + "/" + f, fs::copy_options::overwrite_existing);
  expectRejected(dir, {dir + "/tokenizer.json", dir + "/config.json", "vocab_size 300", "400"},
                 {"--prompt", "hello"});
  expectRejected(dir, {dir + "/tokenizer.json", "vocab_size"});  // with --ids too
}

TEST(CliBadInput, IndexNamingAMissingShard) {
  CheckpointSpec spec = test::smallSpec();
  spec.numShards = 2;
  const std::string dir = test::writeScratchCheckpoint(kTag, "missing-shard", spec);
  fs::remove(dir + "/model-00002-of-00002.safetensors");
  expectRejected(dir, {dir + "/model.safetensors.index.json", "weight_map.",
                       "model-00002-of-00002.safetensors"});
}

TEST(CliBadInput, PickleOnlyDirectory) {
  // With a config.json beside the pickle, and without one.
  const std::string withConfig = test::scratchDir(kTag, "pickle-config").string();
  fs::create_directories(withConfig);
  const std::string good = goodCheckpoint("pickle-source");
  fs::copy_file(good + "/config.json", withConfig + "/config.json");
  test::writeBytes(withConfig + "/pytorch_model.bin", std::string("\x80\x02}q\x00.", 6));
  expectRejected(withConfig, {withConfig, "pytorch_model.bin", "pickle", "save_pretrained"});

  const std::string bare = test::scratchDir(kTag, "pickle-bare").string();
  fs::create_directories(bare);
  test::writeBytes(bare + "/pytorch_model.bin", std::string("\x80\x02}q\x00.", 6));
  expectRejected(bare, {bare, "pytorch_model.bin", "pickle"});
}

TEST(CliBadInput, NonExistentDirectory) {
  const std::string dir = (test::scratchRoot(kTag) / "no-such-model").string();
  expectRejected(dir, {dir});
  EXPECT_FALSE(fs::exists(dir));
}

TEST(CliBadInput, IdsOutsideTheEmbedding) {
  const std::string dir = goodCheckpoint("ids-range");
  expectRejected(dir, {"--ids", "300", "300 rows"}, {"--ids", "1,300"});
  expectRejected(dir, {"--ids", "-1"}, {"--ids=1,-1"});
  expectRejected(dir, {"--ids", "'x'"}, {"--ids", "1,x"});
}

// Issue 12: these segfaulted (stack overflow) before JSON had a nesting-depth limit.
TEST(CliBadInput, DeeplyNestedTokenizerJsonAndConfigJson) {
  const int depth = 100000;
  const std::string tokDir = goodCheckpoint("deep-tokenizer");
  json tok = json::parse(test::readBytes(tokDir + "/tokenizer.json"));
  const std::string leaf = tok["pre_tokenizer"].dump();
  tok["pre_tokenizer"] = "@@";
  std::string open, close;
  for (int i = 0; i < depth; ++i) {
    open += R"({"type":"Sequence","pretokenizers":[)";
    close += "]}";
  }
  std::string text = tok.dump();
  text.replace(text.find("\"@@\""), 4, open + leaf + close);
  test::writeBytes(tokDir + "/tokenizer.json", text);
  expectRejected(
      tokDir, {tokDir + "/tokenizer.json", "field 'pre_tokenizer.pretokenizers[0]", "128 levels"},
      {"--prompt", "Hello"});

  for (const char* field : {"num_hidden_layers", "some_unused_field"}) {
    const std::string dir = goodCheckpoint(std::string("deep-config-") + field);
    json cfg = json::parse(test::readBytes(dir + "/config.json"));
    cfg[field] = "@@";
    std::string c = cfg.dump();
    c.replace(c.find("\"@@\""), 4, std::string(depth, '[') + std::string(depth, ']'));
    test::writeBytes(dir + "/config.json", c);
    expectRejected(dir,
                   {dir + "/config.json", std::string("field '") + field + "[0]", "128 levels"});
  }
}
