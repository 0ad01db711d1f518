// Stage 6: why generation ended and whether that was right (EOS, max new tokens, context).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {
// The llama fixture with its EOS id moved to a token the greedy run produces (58 is the
// 4th greedy token of the first golden prompt), set through generation_config.json.
std::string modelWithEos(int64_t eos) {
  auto dir = fs::temp_directory_path() / ("kvscope-eos-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(test::hfModel("llama") + "/" + f, dir / f, fs::copy_options::overwrite_existing);
  std::ofstream(dir / "generation_config.json") << nlohmann::json{{"eos_token_id", {1, eos}}}.dump();
  return dir.string();
}
const std::vector<int64_t> kStopPrompt = {0,   34,  86,  69,  301, 291, 938, 1014,
                                          303, 435, 856, 276, 781, 90,  996, 15};
}  // namespace

TEST(StoppingStage, EosEndingIsReportedAsCorrect) {
  auto model = Model::load(modelWithEos(58));
  EXPECT_EQ(model->config().eosTokenIds, (std::vector<int64_t>{1, 58}));
  RequestSpec s;
  s.promptIds = kStopPrompt;
  s.maxNewTokens = 16;
  Trace t = Engine(model).run({s}, {});
  EXPECT_EQ(t.requests[0].stopReason, "eos");
  EXPECT_EQ(t.requests[0].generated, (std::vector<int64_t>{422, 623, 113, 58}));
  auto rep = Auditor::audit(*model, t).report;
  EXPECT_TRUE(rep.clean()) << rep.toText();
  EXPECT_EQ(rep.stage("stopping")->status, StageStatus::Pass);
  EXPECT_NE(rep.stopSummary.find("ended: eos after 4 tokens (correct)"), std::string::npos) << rep.stopSummary;
}

TEST(StoppingStage, IgnoredEosIsAStoppingFailure) {
  auto model = Model::load(modelWithEos(58));
  RequestSpec s;
  s.promptIds = kStopPrompt;
  s.maxNewTokens = 8;
  s.stopAtEos = false;  // an engine that ignores EOS
  Trace t = Engine(model).run({s}, {});
  t.requests[0].eosIds = model->config().eosTokenIds;  // ... although the model declares it
  auto rep = Auditor::audit(*model, t).report;
  EXPECT_EQ(rep.stage("stopping")->status, StageStatus::Fail) << rep.toText();
  EXPECT_NE(rep.stopSummary.find("was not honoured"), std::string::npos) << rep.stopSummary;
  EXPECT_FALSE(rep.clean());
}

TEST(StoppingStage, MaxNewTokensAndContextLimitEndings) {
  auto model = Model::load(test::hfModel("gpt2"));
  RequestSpec a;
  a.promptIds = {5, 6, 7};
  a.maxNewTokens = 4;
  a.stopAtEos = false;
  RequestSpec b;
  b.promptIds.assign(61, 9);
  b.maxNewTokens = 10;
  b.stopAtEos = false;
  Trace t = Engine(model).run({a, b}, {});
  auto rep = Auditor::audit(*model, t).report;
  EXPECT_TRUE(rep.clean()) << rep.toText();
  EXPECT_NE(rep.stopSummary.find("request 0 ended: max_new_tokens after 4 tokens (correct)"), std::string::npos) << rep.stopSummary;
  EXPECT_NE(rep.stopSummary.find("request 1 ended: context_limit after 4 tokens"), std::string::npos) << rep.stopSummary;
  // A run that claims max_new_tokens while it stopped early is wrong.
  t.requests[0].maxNewTokens = 10;
  auto wrong = Auditor::audit(*model, t).report;
  EXPECT_EQ(wrong.stage("stopping")->status, StageStatus::Fail) << wrong.toText();
}
