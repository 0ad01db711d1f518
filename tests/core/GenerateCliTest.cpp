// kvscope-cli generate: greedy output against transformers' goldens (single and
// left-padded batch), the trace file, faults, weight updates and the usage errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "CliRunner.hpp"
#include "ScratchCheckpoint.hpp"
#include "TestSupport.hpp"
#include "kvscope/FaultSpec.hpp"
#include "kvscope/Tokenizer.hpp"
#include "kvscope/TraceFile.hpp"

using namespace kvscope;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* kGenerateTag = "cli-generate";

std::vector<int64_t> ints(const json& j) { return j.get<std::vector<int64_t>>(); }

test::CliRun generate(std::vector<std::string> args) {
  args.insert(args.begin(), {"generate", "--model", test::hfModel("llama")});
  return test::runKvscopeCli(args);
}

}  // namespace

TEST(GenerateCli, GreedyJsonMatchesTransformersGenerate) {
  for (const std::string name : {"llama", "gpt2"}) {
    SCOPED_TRACE(name);
    const json prompt = test::goldenJson(name)["prompts"][1];
    const auto want = ints(prompt["generate"]["cache"]);
    const test::CliRun r =
        test::runKvscopeCli({"generate", "--model", test::hfModel(name), "--prompt", prompt["text"],
                             "--max-new", std::to_string(want.size()), "--json"});
    ASSERT_TRUE(r.exitedWith(0)) << r;
    const json out = json::parse(r.out);
    ASSERT_EQ(out.at("requests").size(), 1u);
    const json& req = out.at("requests")[0];
    EXPECT_EQ(req.at("id"), 0);
    EXPECT_EQ(ints(req.at("prompt_ids")), ints(prompt["ids"]));
    EXPECT_EQ(ints(req.at("generated")), want);
    EXPECT_EQ(req.at("stop_reason"), "max_new_tokens");
    const auto tok = Tokenizer::loadFromDirectory(test::hfModel(name));
    EXPECT_EQ(req.at("text"), tok->decode(want));
    EXPECT_TRUE(out.at("faults").empty());
    EXPECT_TRUE(out.at("trace").is_null());
  }
}

TEST(GenerateCli, BatchedPromptsMatchTheLeftPaddedGolden) {
  const json batch = test::goldenJson("llama")["batch"];
  const auto want = batch["generated"];
  const test::CliRun r =
      generate({"--prompt", batch["prompts"][0], "--prompt", batch["prompts"][1], "--batch",
                "--max-new", std::to_string(want[0].size()), "--json"});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  const json out = json::parse(r.out);
  ASSERT_EQ(out.at("requests").size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(ints(out["requests"][i].at("generated")), ints(want[i])) << i;
    EXPECT_EQ(out["requests"][i].at("batch_group"), 0) << i;
  }
}

TEST(GenerateCli, TraceIsWrittenReadableAndNeverOverwritten) {
  const std::string dir = test::scratchDir(kGenerateTag, "trace").string();
  fs::create_directories(dir);
  const std::string path = dir + "/run.kvtrace";
  const test::CliRun r = generate({"--prompt",
                                   "Audit the cache",
                                   "--prompt",
                                   "Short one",
                                   "--prompt",
                                   "Late",
                                   "--arrival",
                                   "0",
                                   "--arrival",
                                   "0",
                                   "--arrival",
                                   "2",
                                   "--batch",
                                   "--max-new",
                                   "4",
                                   "--trace",
                                   path,
                                   "--fault",
                                   "wrong_layer:layer=2,source=1",
                                   "--json"});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  const json out = json::parse(r.out);
  EXPECT_EQ(out.at("trace"), path);
  EXPECT_EQ(out.at("faults"), json({"wrong_layer:layer=2,request=-1,source=1,step=0"}));
  EXPECT_EQ(out["requests"][0].at("batch_group"), 0);
  EXPECT_EQ(out["requests"][1].at("batch_group"), 0);
  EXPECT_TRUE(out["requests"][2].at("batch_group").is_null());  // alone at tick 2

  const Trace trace = TraceFile::read(path);
  ASSERT_EQ(trace.requests.size(), 3u);
  EXPECT_EQ(trace.faults, out.at("faults").get<std::vector<std::string>>());
  EXPECT_EQ(trace.requests[2].arrivalTick, 2);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(trace.requests[i].generated, ints(out["requests"][i].at("generated"))) << i;
  EXPECT_FALSE(trace.hasSnapshots());

  const std::string before = test::readBytes(path);
  const test::CliRun again = generate({"--prompt", "x", "--max-new", "1", "--trace", path});
  EXPECT_TRUE(again.exitedWith(2)) << again;
  EXPECT_NE(again.err.find(path), std::string::npos) << again;
  EXPECT_EQ(test::readBytes(path), before);
}

TEST(GenerateCli, SnapshotsUncachedAndWeightUpdatesReachTheTrace) {
  const std::string dir = test::scratchDir(kGenerateTag, "options").string();
  fs::create_directories(dir);
  const std::string snap = dir + "/snap.kvtrace";
  test::CliRun r =
      generate({"--prompt", "Audit", "--max-new", "3", "--snapshots", "--trace", snap});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  EXPECT_NE(r.out.find("request 0"), std::string::npos) << r;
  EXPECT_TRUE(TraceFile::read(snap).hasSnapshots());

  r = generate({"--prompt", "Audit", "--max-new", "3", "--uncached", "--json"});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  EXPECT_EQ(json::parse(r.out).at("mode"), "uncached");

  r = generate({"--prompt", "Audit", "--max-new", "4", "--json", "--weight-update",
                "2:model.layers.1.self_attn.k_proj.weight:0.5"});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  const json events = json::parse(r.out).at("events");
  ASSERT_EQ(events.size(), 1u) << events;
  EXPECT_EQ(events[0].at("kind"), "weight_update");
  EXPECT_EQ(events[0].at("tick"), 2);
  EXPECT_EQ(events[0].at("tensor"), "model.layers.1.self_attn.k_proj.weight");
}

TEST(GenerateCli, SampledRunsAreReproducibleFromTheSeed) {
  const std::vector<std::string> args = {
      "--prompt", "Audit", "--max-new", "6", "--temperature", "1.5", "--top-k", "50",
      "--top-p",  "0.95",  "--seed",    "7", "--json"};
  const test::CliRun a = generate(args), b = generate(args);
  ASSERT_TRUE(a.exitedWith(0)) << a;
  ASSERT_TRUE(b.exitedWith(0)) << b;
  const json ra = json::parse(a.out)["requests"][0];
  EXPECT_EQ(ra.at("generated"), json::parse(b.out)["requests"][0].at("generated"));
  EXPECT_EQ(ra.at("policy").at("seed"), 7);
}

TEST(GenerateCli, HelpDocumentsEveryFault) {
  const test::CliRun r = test::runKvscopeCli({"generate", "--help"});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  EXPECT_NE(r.out.find("NAME[:key=value"), std::string::npos) << r;
  for (const auto& f : FaultSpec::catalog()) {
    EXPECT_NE(r.out.find("  " + f.name + ": "), std::string::npos) << f.name;
    for (const auto& p : f.parameters)
      EXPECT_NE(r.out.find(p.name + "=" + p.defaultValue), std::string::npos)
          << f.name << " " << p.name;
  }
}

TEST(GenerateCli, BadFaultsPoliciesAndOptionsExitWithCode2) {
  struct Case {
    std::vector<std::string> args;
    std::string mention;
  };
  const std::vector<Case> cases = {
      {{"--fault", "no_such_fault"}, "unknown fault 'no_such_fault'"},
      {{"--fault", "wrong_layer:depth=2"}, "bad parameter 'depth=2'"},
      {{"--fault", "wrong_layer:layer=x"}, "needs an integer"},
      {{"--fault", "wrong_layer:layer=9"}, "not a layer of this model"},
      {{"--temperature", "-1"}, "temperature"},
      {{"--temperature", "1", "--top-p", "1.5"}, "top"},
      {{"--temperature", "1", "--top-k", "0"}, "top"},
      {{"--arrival", "0", "--arrival", "1"}, "--arrival"},
      {{"--arrival", "-1"}, "--arrival"},
      {{"--weight-update", "1:model.nope.weight:0.1"}, "model.nope.weight"},
      {{"--weight-update", "x:model.norm.weight:0.1"}, "TICK"},
      {{"--weight-update", "1:model.norm.weight"}, "TICK:TENSOR:SCALE"},
      {{"--weight-update", "1:model.norm.weight:big"}, "SCALE"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"--prompt", "Audit", "--max-new", "2"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const test::CliRun r = generate(args);
    EXPECT_TRUE(r.exitedWith(2)) << r;
    EXPECT_TRUE(r.out.empty()) << r;
    EXPECT_NE(r.err.find(c.mention), std::string::npos) << "'" << c.mention << "' in\n" << r;
  }
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--prompt", "Audit"},  // no --max-new
        std::vector<std::string>{"--max-new", "2"},     // no --prompt
        std::vector<std::string>{"--prompt", "Audit", "--max-new", "0"}}) {
    const test::CliRun r = generate(args);
    EXPECT_TRUE(r.exitedWith(2)) << r;
  }
}

TEST(GenerateCli, IdsInsteadOfPromptText) {
  using kvscope::test::hfModel;
  using kvscope::test::runKvscopeCli;
  auto r = runKvscopeCli({"generate", "--model", hfModel("llama"), "--ids", "0,34,86,69", "--ids",
                          "5,6", "--max-new", "3", "--json"});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["requests"].size(), 2u);
  EXPECT_EQ(j["requests"][0]["prompt_ids"], (std::vector<int64_t>{0, 34, 86, 69}));
  EXPECT_EQ(j["requests"][1]["prompt_ids"], (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(j["requests"][0]["generated"].size(), 3u);
  // The same ids as text-free prompts generate what the reference's greedy argmax picks.
  auto ref =
      runKvscopeCli({"reference", "--model", hfModel("llama"), "--ids", "0,34,86,69", "--json"});
  ASSERT_TRUE(ref.exitedWith(0)) << ref;
  EXPECT_EQ(nlohmann::json::parse(ref.out)["top"][0]["id"], j["requests"][0]["generated"][0])
      << ref.out;
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"--ids", "1,x"},
                                             {"--ids", ""},
                                             {"--ids", "1", "--prompt", "text"},
                                             {"--ids", "99999"},
                                             {}}) {
    std::vector<std::string> args{"generate", "--model", hfModel("llama"), "--max-new", "2"};
    args.insert(args.end(), bad.begin(), bad.end());
    auto b = runKvscopeCli(args);
    EXPECT_TRUE(b.exitedWith(2)) << b;
  }
}

TEST(GenerateCli, IdsWorkWithoutATokenizerAsInReference) {
  // A checkpoint without tokenizer files: --ids run (as `reference --ids` does), the text
  // is left out, and the trace audits; prompt text still needs a tokenizer.
  const std::string dir =
      test::writeScratchCheckpoint(kGenerateTag, "no-tokenizer", test::smallSpec());
  fs::remove(dir + "/tokenizer.json");
  fs::remove(dir + "/tokenizer_config.json");
  const std::string trace = test::freshDir("cli-generate-no-tokenizer").string() + "/run.kvtrace";
  fs::create_directories(fs::path(trace).parent_path());
  auto r = test::runKvscopeCli({"generate", "--model", dir, "--ids", "5,6,7", "--max-new", "3",
                                "--json", "--trace", trace});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["requests"].size(), 1u);
  EXPECT_EQ(j["requests"][0]["prompt_ids"], (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(j["requests"][0]["generated"].size(), 3u);
  EXPECT_TRUE(j["requests"][0]["text"].is_null()) << r.out;
  // The plain-text summary says why there is no text.
  r = test::runKvscopeCli({"generate", "--model", dir, "--ids", "5,6,7", "--max-new", "2"});
  ASSERT_TRUE(r.exitedWith(0)) << r;
  EXPECT_NE(r.out.find("text:      (no tokenizer"), std::string::npos) << r;
  // The same greedy token as the reference's argmax.
  const auto ref = test::runKvscopeCli({"reference", "--model", dir, "--ids", "5,6,7", "--json"});
  ASSERT_TRUE(ref.exitedWith(0)) << ref;
  EXPECT_EQ(json::parse(ref.out)["top"][0]["id"], j["requests"][0]["generated"][0]) << ref.out;
  const auto audit = test::runKvscopeCli({"audit", "--model", dir, "--trace", trace});
  EXPECT_TRUE(audit.exitedWith(0)) << audit;

  r = test::runKvscopeCli({"generate", "--model", dir, "--prompt", "hello", "--max-new", "2"});
  EXPECT_TRUE(r.exitedWith(2)) << r;
  EXPECT_NE(r.err.find("no tokenizer"), std::string::npos) << r;
}
