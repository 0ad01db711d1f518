// kvscope-cli audit end to end: exit codes (0 clean, 1 divergent, 2 input error), JSON and
// Markdown reports, and traces from files (version 2 and version 1).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "CliRunner.hpp"
#include "PythonTools.hpp"
#include "TestSupport.hpp"

using namespace kvscope::test;
namespace fs = std::filesystem;

namespace {
std::string llama() { return hfModel("llama"); }
CliRun audit(std::vector<std::string> args) {
  args.insert(args.begin(), "audit");
  return runKvscopeCli(args);
}
}  // namespace

TEST(CliAudit, CleanRunExitsZero) {
  auto r = audit({"--model", llama(), "--ids", "0,34,86,69", "--max-new", "4"});
  EXPECT_TRUE(r.exitedWith(0)) << r;
  EXPECT_NE(r.out.find("verdict: clean"), std::string::npos) << r;
}

TEST(CliAudit, FaultyRunExitsOneWithJsonReport) {
  const auto dir = freshDir("cli-audit");
  fs::create_directories(dir);
  auto r = audit({"--model", llama(), "--ids", "0,34,86,69,301", "--ids", "0,316,284", "--arrival", "0", "--arrival",
                  "2", "--max-new", "5", "--fault", "wrong_layer:layer=2,source=1", "--fault",
                  "cross_request:request=1,victim=0", "--json", "--report", (dir / "report.json").string(),
                  "--markdown", (dir / "report.md").string(), "--save-trace", (dir / "run.kvtrace").string()});
  EXPECT_TRUE(r.exitedWith(1)) << r;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["verdict"], "divergent");
  EXPECT_EQ(j["first_divergence"]["layer"], 2);
  std::set<std::string> ids;
  for (const auto& f : j["findings"]) ids.insert(f["id"].get<std::string>());
  EXPECT_TRUE(ids.count("wrong_layer") && ids.count("cross_request")) << r;
  EXPECT_EQ(nlohmann::json::parse(readWholeFile(dir / "report.json"))["verdict"], "divergent");
  EXPECT_NE(readWholeFile(dir / "report.md").find("`wrong_layer`"), std::string::npos);
  // The saved trace audits the same way through --trace.
  auto again = audit({"--model", llama(), "--trace", (dir / "run.kvtrace").string()});
  EXPECT_TRUE(again.exitedWith(1)) << again;
  EXPECT_NE(again.out.find("[wrong_layer]"), std::string::npos) << again;
  // Existing report files are not overwritten without --force.
  auto refused = audit({"--model", llama(), "--ids", "0,34", "--max-new", "2", "--report", (dir / "report.json").string()});
  EXPECT_TRUE(refused.exitedWith(2)) << refused;
  EXPECT_EQ(nlohmann::json::parse(readWholeFile(dir / "report.json"))["verdict"], "divergent");
}

TEST(CliAudit, VersionOneTraceIsAudited) {
  // Recorded by the version 1 writer with a duplicate append at layer 1, step 2.
  auto r = audit({"--model", llama(), "--trace", fixture("traces-v1/llama-engine-snapshots.kvtrace"), "--json"});
  EXPECT_TRUE(r.exitedWith(1)) << r;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["first_divergence"]["layer"], 1);
  EXPECT_EQ(j["first_divergence"]["step"], 2);
  EXPECT_EQ(j["findings"][0]["id"], "duplicate_append") << r;
}

TEST(CliAudit, InputErrorsExitTwoNamingTheFileAndField) {
  const auto dir = freshDir("cli-audit-bad");
  fs::create_directories(dir);
  const auto bad = dir / "truncated.kvtrace";
  std::ofstream(bad) << "not a trace";
  auto r = audit({"--model", llama(), "--trace", bad.string()});
  EXPECT_TRUE(r.exitedWith(2)) << r;
  EXPECT_NE(r.err.find(bad.string()), std::string::npos) << r;
  // A version 2 trace whose step table names more records than its layer tensor holds.
  const auto good = dir / "good.kvtrace";
  ASSERT_TRUE(audit({"--model", llama(), "--ids", "0,34", "--max-new", "2", "--save-trace", good.string()}).exitedWith(0));
  const auto cut = dir / "cut.kvtrace";
  rewriteTrace(good.string(), cut.string(), [](nlohmann::json& doc) { doc["steps"]["appended"][1][1] = 3; });
  const auto before = readWholeFile(cut);
  auto c = audit({"--model", llama(), "--trace", cut.string()});
  EXPECT_TRUE(c.exitedWith(2)) << c;
  EXPECT_NE(c.err.find(cut.string()), std::string::npos) << c;
  EXPECT_NE(c.err.find("layer1.k"), std::string::npos) << c;
  EXPECT_EQ(readWholeFile(cut), before) << "the user's trace is left as it was";
  auto fault = audit({"--model", llama(), "--ids", "0,34", "--fault", "wrong_layer:layer=9"});
  EXPECT_TRUE(fault.exitedWith(2)) << fault;
  EXPECT_NE(fault.err.find("not a layer"), std::string::npos) << fault;
  auto temp = audit({"--model", llama(), "--ids", "0,34", "--temperature", "-1"});
  EXPECT_TRUE(temp.exitedWith(2)) << temp;
  auto noModel = audit({"--trace", bad.string()});
  EXPECT_TRUE(noModel.exitedWith(2)) << noModel;
  auto help = audit({"--help"});
  EXPECT_TRUE(help.exitedWith(0)) << help;
  EXPECT_NE(help.out.find("cross_request"), std::string::npos) << "fault syntax is documented in --help";
}

TEST(CliAudit, WeightsVersionsNameLaterCheckpoints) {
  // The transformers-recorded weight update: steps 5.. used gpt2-updated's k/v weights.
  const auto dir = freshDir("cli-audit-weights");
  fs::create_directories(dir);
  const auto trace = (dir / "stale.kvtrace").string();
  const auto repo = kvscope::test::toolsDir().parent_path();
  const auto convert = kvscope::test::run(
      std::string(kvscope::test::kPython) + " " +
      kvscope::test::quote((repo / "tests/scenarios/scenario_to_trace.py").string()) + " " +
      kvscope::test::quote(fixture("hf/scenarios/gpt2.stale_cache.json")) + " " +
      kvscope::test::quote(hfModel("gpt2")) + " " + kvscope::test::quote(trace));
  ASSERT_EQ(convert.status, 0) << convert.output;
  auto both = audit({"--model", hfModel("gpt2"), "--trace", trace, "--weights-version",
                     "1=" + hfModel("gpt2-updated"), "--json"});
  ASSERT_TRUE(both.exitedWith(1)) << both;
  const auto report = nlohmann::json::parse(both.out);
  ASSERT_EQ(report["findings"].size(), 1u) << both.out;
  const auto& ev = report["findings"][0]["evidence"];
  EXPECT_EQ(report["findings"][0]["id"], "stale_cache");
  EXPECT_LE(ev["reused_vs_old_weights"].get<double>(), ev["tolerance"].get<double>()) << ev;
  EXPECT_GT(ev["reused_vs_new_weights"].get<double>(), ev["tolerance"].get<double>()) << ev;
  for (const auto& c : report["stages"][1]["checks"])
    EXPECT_EQ(c.get<std::string>().rfind("not checked:", 0), std::string::npos) << c;
  auto one = audit({"--model", hfModel("gpt2"), "--trace", trace});
  EXPECT_TRUE(one.exitedWith(1)) << one;
  EXPECT_NE(one.out.find("values not checked"), std::string::npos) << one;

  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"--weights-version", "one=/x"},
           {"--weights-version", "0=/x"},
           {"--weights-version", "1="},
           {"--weights-version", "-1=/x"},
           {"--weights-version", "1=/a", "--weights-version", "1=/b"}}) {
    std::vector<std::string> args{"--model", hfModel("gpt2"), "--trace", trace};
    args.insert(args.end(), bad.begin(), bad.end());
    auto r = audit(args);
    EXPECT_TRUE(r.exitedWith(2)) << r;
    EXPECT_NE(r.err.find("--weights-version"), std::string::npos) << r;
  }
  auto noModel = audit({"--reference-trace", trace, "--trace", trace, "--weights-version",
                        "1=" + hfModel("gpt2-updated")});
  EXPECT_TRUE(noModel.exitedWith(2)) << noModel;
  EXPECT_NE(noModel.err.find("needs a model"), std::string::npos) << noModel;
  const auto missing = (dir / "no-such-checkpoint").string();
  auto absent =
      audit({"--model", hfModel("gpt2"), "--trace", trace, "--weights-version", "1=" + missing});
  EXPECT_TRUE(absent.exitedWith(2)) << absent;
  EXPECT_NE(absent.err.find(missing), std::string::npos) << absent;
  auto shape = audit(
      {"--model", hfModel("gpt2"), "--trace", trace, "--weights-version", "1=" + hfModel("llama")});
  EXPECT_TRUE(shape.exitedWith(2)) << shape;
  EXPECT_NE(shape.err.find("weights version 1"), std::string::npos) << shape;
}

TEST(CliAudit, SamplingOptionsMeanWhatGenerateAndPolicyMean) {
  // One rule (SamplingOptions): 0 is never "off"; a given top-k must be >= 1, top-p in (0, 1].
  for (const std::string cmd : {"audit", "generate"})
    for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
             {"--top-p", "0"}, {"--top-k", "0"}, {"--top-p", "1.5"}, {"--temperature", "-1"}}) {
      std::vector<std::string> args{cmd, "--model", llama(), "--ids", "0,34", "--max-new", "2"};
      args.insert(args.end(), bad.begin(), bad.end());
      auto r = runKvscopeCli(args);
      EXPECT_TRUE(r.exitedWith(2)) << cmd << " " << bad[0] << " " << bad[1] << "\n" << r;
    }
  auto ok = audit({"--model", llama(), "--ids", "0,34", "--max-new", "2", "--temperature", "0.7",
                   "--top-k", "5", "--top-p", "0.9", "--seed", "3", "--json"});
  ASSERT_TRUE(ok.exitedWith(0)) << ok;
  const auto policy = nlohmann::json::parse(ok.out)["stages"][4]["checks"][0].get<std::string>();
  EXPECT_NE(policy.find("T=0.7 top-k=5 top-p=0.9 seed=3"), std::string::npos) << policy;
}
