// kvscope-cli reference: tokenization, the JSON document against the in-process
// reference, the --dump file, the vocabulary notes and the usage errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "CliRunner.hpp"
#include "ScratchCheckpoint.hpp"
#include "TestSupport.hpp"
#include "kvscope/Model.hpp"

using namespace kvscope;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* kReferenceTag = "cli-reference";

FloatTensor lastRowOf(const FloatTensor& t) { return test::rows(t, t.dim(0) - 1, 1); }

}  // namespace

TEST(ReferenceCli, JsonMatchesTheInProcessReferenceForEveryFixture) {
  for (const std::string name : {"llama", "gpt2"}) {
    SCOPED_TRACE(name);
    const json prompt = test::goldenJson(name)["prompts"][0];
    const test::CliRun r =
        test::runKvscopeCli({"reference", "--model", test::hfModel(name), "--prompt",
                             prompt["text"], "--json", "--top", "5"});
    ASSERT_TRUE(r.exitedWith(0)) << r;
    const json out = json::parse(r.out);
    const auto ids = prompt["ids"].get<std::vector<int64_t>>();
    EXPECT_EQ(out.at("ids").get<std::vector<int64_t>>(), ids);  // special tokens included
    EXPECT_EQ(out.at("tokens").size(), ids.size());

    const auto model = Model::load(test::hfModel(name));
    EXPECT_EQ(out.at("fingerprint"), model->fingerprint());
    EXPECT_EQ(out.at("dtype"), "F32");
    EXPECT_EQ(out.at("architecture"), name);
    const FloatTensor want = lastRowOf(model->reference(ids).logits);
    const auto last = out.at("last_logits").get<std::vector<float>>();
    ASSERT_EQ(static_cast<int64_t>(last.size()), want.dim(1));
    EXPECT_EQ(last, want.data);  // floats survive the JSON round trip exactly

    const json& top = out.at("top");
    ASSERT_EQ(top.size(), 5u);
    const auto argmax = std::max_element(last.begin(), last.end()) - last.begin();
    EXPECT_EQ(top[0].at("id"), argmax);
    EXPECT_EQ(top[0].at("id").get<int64_t>(), prompt["greedy_manual"][0].get<int64_t>());
    double previous = 2.0, mass = 0.0;
    for (const auto& c : top) {
      const double p = c.at("probability").get<double>();
      EXPECT_LE(p, previous);
      previous = p;
      mass += p;
      EXPECT_EQ(c.at("logit").get<float>(), last[c.at("id").get<size_t>()]);
      EXPECT_TRUE(c.at("token").is_string());
    }
    EXPECT_GT(mass, 0.0);
    EXPECT_LE(mass, 1.0 + 1e-12);
  }
}

TEST(ReferenceCli, TextSummaryNamesModelAndTopTokens) {
  const json prompt = test::goldenJson("llama")["prompts"][0];
  const test::CliRun r = test::runKvscopeCli(
      {"reference", "--model", test::hfModel("llama"), "--prompt", prompt["text"]});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  const auto model = Model::load(test::hfModel("llama"));
  EXPECT_NE(r.out.find(model->fingerprint()), std::string::npos) << r;
  EXPECT_NE(r.out.find("llama"), std::string::npos) << r;
  EXPECT_NE(r.out.find("top 10"), std::string::npos) << r;
  EXPECT_NE(r.out.find(" " + std::to_string(prompt["greedy_manual"][0].get<int64_t>()) + "  "),
            std::string::npos)
      << r;
}

TEST(ReferenceCli, DumpHoldsLogitsHiddenStatesAndKvAndIsNeverOverwritten) {
  const std::string dir = test::scratchDir(kReferenceTag, "dump").string();
  fs::create_directories(dir);
  const std::string dump = dir + "/ref.safetensors";
  const std::vector<int64_t> ids = {0, 34, 86, 69, 301};
  const test::CliRun r = test::runKvscopeCli(
      {"reference", "--model", test::hfModel("llama"), "--ids", "0,34,86,69,301", "--dump", dump});
  ASSERT_TRUE(r.exitedWith(0)) << r;

  const auto model = Model::load(test::hfModel("llama"));
  const ReferenceRun run = model->reference(ids);
  {
    auto file = SafetensorsFile::open(dump);
    EXPECT_EQ(file->readFloat("logits"), run.logits);
    ASSERT_EQ(run.hiddenStates.size(), 4u);
    for (size_t j = 0; j < run.hiddenStates.size(); ++j)
      EXPECT_EQ(file->readFloat("hidden." + std::to_string(j)), run.hiddenStates[j]) << j;
    for (size_t l = 0; l < run.keys.size(); ++l) {
      const FloatTensor k = file->readFloat("layer" + std::to_string(l) + ".k");
      EXPECT_EQ(k.shape, (std::vector<int64_t>{2, 5, 16}));
      EXPECT_EQ(k, run.keys[l]);
      EXPECT_EQ(file->readFloat("layer" + std::to_string(l) + ".v"), run.values[l]);
    }
    EXPECT_EQ(file->names().size(), 1 + 4 + 2 * run.keys.size());
  }

  const std::string before = test::readBytes(dump);
  const test::CliRun again = test::runKvscopeCli(
      {"reference", "--model", test::hfModel("llama"), "--ids", "1,2", "--dump", dump});
  EXPECT_TRUE(again.exitedWith(2)) << again;
  EXPECT_NE(again.err.find(dump), std::string::npos) << again;
  EXPECT_NE(again.err.find("overwrite"), std::string::npos) << again;
  EXPECT_EQ(test::readBytes(dump), before);
}

// A model with recurrent layers (Qwen3.5: layers 0 and 2) dumps their state after the prompt
// where an attention layer's K/V go (it crashed writing their empty K/V before).
TEST(ReferenceCli, DumpHoldsARecurrentLayersStateInsteadOfKv) {
  const std::string dir = test::scratchDir(kReferenceTag, "dump-recurrent").string();
  fs::create_directories(dir);
  const std::string dump = dir + "/ref.safetensors";
  fs::remove(dump);
  const std::string model = test::fixture("families/models/qwen3_5_text");
  const test::CliRun r = test::runKvscopeCli({"reference", "--model", model, "--ids", "5,17,300,41", "--dump", dump});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  const ReferenceRun run = Model::load(model)->reference({5, 17, 300, 41});
  auto file = SafetensorsFile::open(dump);
  EXPECT_EQ(file->readFloat("layer0.state"), run.recurrentStates[0]);
  EXPECT_EQ(file->readFloat("layer0.conv").shape, (std::vector<int64_t>{64, 4}));
  EXPECT_EQ(file->readFloat("layer1.k"), run.keys[1]);
  const std::vector<std::string> names = file->names();
  EXPECT_EQ(std::count(names.begin(), names.end(), "layer0.k"), 0);
}

TEST(ReferenceCli, PaddingRowsBeyondTheTokenizerAreANoteNotAnError) {
  CheckpointSpec spec = test::smallSpec();
  spec.vocabSize = 400;
  const std::string dir = test::writeScratchCheckpoint(kReferenceTag, "padded", spec);
  spec.vocabSize = 300;
  const std::string small = test::writeScratchCheckpoint(kReferenceTag, "padded-tokenizer", spec);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(small + "/" + f, dir + "/" + f, fs::copy_options::overwrite_existing);

  test::CliRun r =
      test::runKvscopeCli({"reference", "--model", dir, "--prompt", "hello", "--json"});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  EXPECT_NE(r.err.find("note: "), std::string::npos) << r;
  EXPECT_NE(r.err.find("padding"), std::string::npos) << r;
  const json out = json::parse(r.out);
  EXPECT_EQ(out.at("notes").size(), 1u);
  EXPECT_EQ(out.at("last_logits").size(), 400u);

  r = test::runKvscopeCli({"reference", "--model", dir, "--prompt", "hello"});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  EXPECT_NE(r.out.find("note: "), std::string::npos) << r;
}

TEST(ReferenceCli, IdsWorkWithoutATokenizerButPromptsDoNot) {
  const std::string dir =
      test::writeScratchCheckpoint(kReferenceTag, "no-tokenizer", test::smallSpec());
  fs::remove(dir + "/tokenizer.json");
  fs::remove(dir + "/tokenizer_config.json");
  test::CliRun r =
      test::runKvscopeCli({"reference", "--model", dir, "--ids", "5,6,7", "--json", "--top", "3"});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  const json out = json::parse(r.out);
  EXPECT_FALSE(out.contains("tokens"));
  EXPECT_TRUE(out.at("top")[0].at("token").is_null());
  EXPECT_EQ(out.at("top").size(), 3u);

  r = test::runKvscopeCli({"reference", "--model", dir, "--prompt", "hello"});
  EXPECT_TRUE(r.exitedWith(2)) << r;
  EXPECT_NE(r.err.find("no tokenizer"), std::string::npos) << r;
}

TEST(ReferenceCli, UsageErrorsExitWithCode2) {
  const std::string model = test::hfModel("llama");
  const std::vector<std::vector<std::string>> cases = {
      {"reference", "--model", model},                                  // neither
      {"reference", "--model", model, "--ids", "1", "--prompt", "hi"},  // both
      {"reference", "--model", model, "--ids", "1,,2"},
      {"reference", "--model", model, "--ids", "1,2,"},
      {"reference", "--model", model, "--ids", "1", "--top", "-1"},
      {"reference", "--ids", "1"},  // no model
  };
  for (const auto& args : cases) {
    const test::CliRun r = test::runKvscopeCli(args);
    EXPECT_TRUE(r.exitedWith(2)) << r;
    EXPECT_TRUE(r.out.empty()) << r;
    EXPECT_FALSE(r.err.empty()) << r;
  }
}
