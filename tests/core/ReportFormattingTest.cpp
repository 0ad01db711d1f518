// The Markdown report a bug bundle carries: counts print as integers ("7", not "7.0000"),
// and "(near tie)" marks only steps whose reference top-2 margin is within twice the
// logits tolerance — on a real audit of the llama fixture with a wrong_layer fault, whose
// logits leave the tolerance by far (a margin of 2 is no tie there).
#include <gtest/gtest.h>

#include <sstream>

#include "TestSupport.hpp"
#include "kvscope/AuditJob.hpp"
#include "kvscope/AuditReport.hpp"

using namespace kvscope;

TEST(ReportFormatting, IntegersPrintAsIntegers) {
  AuditReport r;
  Finding f;
  f.id = "wrong_layer";
  f.evidence = {
      {"source_layer", 1.0}, {"requests_affected", 7.0}, {"match_error", 0.0}, {"ratio", 0.5}};
  r.findings.push_back(f);
  const std::string md = r.toMarkdown();
  EXPECT_NE(md.find("`requests_affected` = 7\n"), std::string::npos) << md;
  EXPECT_NE(md.find("`source_layer` = 1\n"), std::string::npos) << md;
  EXPECT_NE(md.find("`match_error` = 0\n"), std::string::npos) << md;
  EXPECT_NE(md.find("`ratio` = 0.5000\n"), std::string::npos) << md;
  EXPECT_EQ(md.find(".0000\n"), std::string::npos) << md;
}

TEST(ReportFormatting, NearTieOnlyWithinTwiceTheTolerance) {
  AuditJobSpec spec;
  spec.modelDir = test::hfModel("llama");
  spec.promptIds = {{0, 34, 86, 69}};
  spec.maxNewTokens = 6;
  spec.faults = {"wrong_layer:layer=1,source=0"};
  const AuditJobOutput out = runAuditJob(spec);
  const AuditReport& r = out.result.report;
  ASSERT_FALSE(r.steps.empty());
  int wide = 0;
  for (const StepNumerics& s : r.steps) {
    EXPECT_EQ(s.nearTie, s.top2Margin < 2 * s.tolerance)
        << "step " << s.step << " margin " << s.top2Margin;
    if (s.top2Margin >= 2 * s.tolerance && s.maxLogitError > s.top2Margin) ++wide;
  }
  // The bug: a margin below the (large) observed error was called a near tie.
  EXPECT_GT(wide, 0);
  int ties = 0, labelled = 0;
  for (const StepNumerics& s : r.steps) ties += s.nearTie ? 1 : 0;
  std::istringstream md(r.toMarkdown());
  for (std::string line; std::getline(md, line);)
    labelled += line.find("(near tie)") != std::string::npos ? 1 : 0;
  EXPECT_EQ(labelled, ties);
}
