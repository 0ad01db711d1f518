// kvscope-cli audit with a wrong file as the trace: the error names what the file is first
// (TraceFileSniffer), not the safetensors reader's "header claims N bytes".
#include <gtest/gtest.h>

#include "CliRunner.hpp"
#include "TestSupport.hpp"

using namespace kvscope;

TEST(CliNotATrace, JsonAndModelWeightsAreNamed) {
  const std::string model = test::hfModel("llama");
  const auto json =
      test::runKvscopeCli({"audit", "--model", model, "--trace", model + "/config.json"});
  EXPECT_EQ(json.exitCode, 2) << json;
  EXPECT_NE(json.err.find("config.json: this is not a .kvtrace file (it looks like JSON)"),
            std::string::npos)
      << json;
  EXPECT_EQ(json.err.find("header claims"), std::string::npos) << json;

  const auto weights =
      test::runKvscopeCli({"audit", "--model", model, "--trace", model + "/model.safetensors"});
  EXPECT_EQ(weights.exitCode, 2) << weights;
  EXPECT_NE(weights.err.find("this is not a .kvtrace file (it looks like a safetensors file"),
            std::string::npos)
      << weights;

  const auto reference = test::runKvscopeCli(
      {"audit", "--trace", test::fixture("traces-v1/example.kvtrace"), "--reference-trace", model});
  EXPECT_EQ(reference.exitCode, 2) << reference;
  EXPECT_NE(reference.err.find("this is a folder, not a .kvtrace file"), std::string::npos)
      << reference;
}
