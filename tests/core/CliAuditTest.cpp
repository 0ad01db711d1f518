// kvscope-cli audit end to end: exit codes (0 clean, 1 divergent, 2 input error), JSON and
// Markdown reports, and traces from files.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <fstream>
#include <nlohmann/json.hpp>

#include "PythonTools.hpp"
#include "TestSupport.hpp"

using namespace kvscope::test;
namespace fs = std::filesystem;

namespace {
std::string cli() { return quote(KVSCOPE_CLI_PATH); }
std::string llama() { return quote(hfModel("llama")); }
std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
}  // namespace

TEST(CliAudit, CleanRunExitsZero) {
  auto r = run(cli() + " audit --model " + llama() + " --ids 0,34,86,69 --max-new 4");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("verdict: clean"), std::string::npos) << r.output;
}

TEST(CliAudit, FaultyRunExitsOneWithJsonReport) {
  const auto dir = tempDir() / "cli-audit";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto r = run(cli() + " audit --model " + llama() + " --ids 0,34,86,69,301 --ids 0,316,284 --arrival 0 --arrival 2" +
               " --max-new 5 --fault wrong_layer:layer=2,source=1 --fault cross_request:request=1,victim=0 --json" +
               " --report " + quote((dir / "report.json").string()) + " --markdown " + quote((dir / "report.md").string()) +
               " --save-trace " + quote((dir / "run.kvtrace").string()) + " 2>/dev/null");
  EXPECT_EQ(r.status, 1) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["verdict"], "divergent");
  EXPECT_EQ(j["first_divergence"]["layer"], 2);
  std::set<std::string> ids;
  for (const auto& f : j["findings"]) ids.insert(f["id"].get<std::string>());
  EXPECT_TRUE(ids.count("wrong_layer") && ids.count("cross_request")) << r.output;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir / "report.json"))["verdict"], "divergent");
  EXPECT_NE(slurp(dir / "report.md").find("`wrong_layer`"), std::string::npos);
  // The saved trace audits the same way through --trace.
  auto again = run(cli() + " audit --model " + llama() + " --trace " + quote((dir / "run.kvtrace").string()));
  EXPECT_EQ(again.status, 1) << again.output;
  EXPECT_NE(again.output.find("[wrong_layer]"), std::string::npos) << again.output;
  // Existing report files are not overwritten without --force.
  auto refused = run(cli() + " audit --model " + llama() + " --ids 0,34 --max-new 2 --report " + quote((dir / "report.json").string()));
  EXPECT_EQ(refused.status, 2) << refused.output;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir / "report.json"))["verdict"], "divergent");
}

TEST(CliAudit, InputErrorsExitTwoNamingTheFileAndField) {
  const auto dir = tempDir() / "cli-audit-bad";
  fs::create_directories(dir);
  const auto bad = dir / "truncated.kvtrace";
  std::ofstream(bad) << "not a trace";
  auto r = run(cli() + " audit --model " + llama() + " --trace " + quote(bad.string()));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(bad.string()), std::string::npos) << r.output;
  auto fault = run(cli() + " audit --model " + llama() + " --ids 0,34 --fault wrong_layer:layer=9");
  EXPECT_EQ(fault.status, 2) << fault.output;
  EXPECT_NE(fault.output.find("not a layer"), std::string::npos) << fault.output;
  auto temp = run(cli() + " audit --model " + llama() + " --ids 0,34 --temperature -1");
  EXPECT_EQ(temp.status, 2) << temp.output;
  auto noModel = run(cli() + " audit --trace " + quote(bad.string()));
  EXPECT_EQ(noModel.status, 2) << noModel.output;
  auto help = run(cli() + " audit --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.output.find("cross_request"), std::string::npos) << "fault syntax is documented in --help";
}
