#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>

#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"

using namespace kvscope;

namespace {
AuditResult runWith(const std::string& model, const std::vector<std::string>& faults, int requests = 1) {
  auto m = Model::load(test::hfModel(model));
  std::vector<RequestSpec> specs;
  for (int i = 0; i < requests; ++i) {
    RequestSpec s;
    s.promptIds = i == 0 ? std::vector<int64_t>{0, 34, 86, 69, 301, 291} : std::vector<int64_t>{0, 316, 284, 117};
    s.maxNewTokens = 6;
    s.stopAtEos = false;
    s.arrivalTick = i * 2;
    specs.push_back(s);
  }
  EngineOptions o;
  for (const auto& f : faults) o.faults.push_back(FaultSpec::parse(f));
  Trace t = Engine(m).run(specs, o);
  auto fresh = Model::load(test::hfModel(model));
  return Auditor::audit(*fresh, t);
}
}  // namespace

TEST(AuditSmoke, CleanRunHasNoFindings) {
  auto r = runWith("llama", {}, 2);
  std::cout << r.report.toText();
  EXPECT_TRUE(r.report.clean());
  EXPECT_TRUE(r.report.findings.empty());
}

TEST(AuditSmoke, WrongLayerAndCrossRequest) {
  auto r = runWith("llama", {"wrong_layer:layer=2,source=1", "cross_request:request=1,victim=0"}, 2);
  std::cout << r.report.toText();
  EXPECT_TRUE(r.report.hasFinding("wrong_layer"));
  EXPECT_TRUE(r.report.hasFinding("cross_request"));
  // The finding's observation and first check name its layers, not the matrix's example.
  for (const auto& f : r.report.findings)
    if (f.id == "wrong_layer") {
      EXPECT_EQ(f.layer, 2);
      EXPECT_EQ(f.matrixRow, "layer 1 matches, layer 2 differs");
      EXPECT_EQ(f.firstCheck, "layer 2's cache source and append");
    }
  auto one = runWith("llama", {"wrong_layer:layer=1,source=0"});
  ASSERT_FALSE(one.report.findings.empty()) << one.report.toText();
  EXPECT_EQ(one.report.findings.front().matrixRow, "layer 0 matches, layer 1 differs");
}

TEST(AuditSmoke, PerStepReferenceCrossCheckAgreesWithTeacherForcing) {
  auto m = Model::load(test::hfModel("gpt2"));
  RequestSpec s;
  s.promptIds = {5, 6, 7, 8};
  s.maxNewTokens = 5;
  s.stopAtEos = false;
  Trace t = Engine(m).run({s}, {});
  AuditOptions o;
  o.perStepReference = true;
  auto r = Auditor::audit(*m, t, o);
  const auto& checks = r.report.stages[3].checks;
  // The reference's rows from the prompt's last on (and one before it): the 9-token stream's
  // positions 2..8; the prompt's earlier rows are not computed (no step chose from them).
  auto it = std::find_if(checks.begin(), checks.end(), [](const std::string& c) { return c.rfind("cross-check: 7 per-step", 0) == 0; });
  ASSERT_NE(it, checks.end()) << r.report.toText();
  // The recomputes agree to float32 noise.
  const double maxDiff = std::stod(it->substr(it->find("max diff ") + 9));
  EXPECT_LT(maxDiff, 1e-4);
}
