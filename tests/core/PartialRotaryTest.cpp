// partial_rotary (KV Scope's row): on a partial-rotary checkpoint (the phi3 fixture written by
// real transformers: 6 of each head's 12 features rotate), a cached path that rotates the
// whole head. The evidence re-derives every key record from the reference under each of three
// whole-head rotations engines shipped and names the one that fits; the other rotation rows
// do not claim it, and the fault refuses a checkpoint that rotates whole heads already.
#include <gtest/gtest.h>

#include "AuditExpectations.hpp"
#include "audit/rows/partial_rotary/PartialRotaryEvidence.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "kvscope/FaultSpec.hpp"

using namespace kvscope;

namespace {

std::string phi3() { return test::fixture("families/models/phi3"); }

TEST(PartialRotary, MatrixRowIsKvScopesAddition) {
  const auto& row = FailureMatrix::row(finding::PartialRotary);
  EXPECT_NE(row.observation.find("partial-rotary checkpoint"), std::string::npos);
  test::expectAdditionAfter(finding::PartialRotary, finding::LayerRopeTheta);
}

TEST(PartialRotary, TheWholeHeadRotatedIsFoundAtLayer0Position1) {
  auto model = Model::load(phi3());
  const Trace t = test::writtenAndRead(test::runWithFaults(phi3(), {"partial_rotary"}),
                                       "partial-rotary", "all.kvtrace");
  const AuditReport rep = Auditor::audit(*model, t).report;
  const Finding& f = test::onlyFinding(rep, finding::PartialRotary);
  EXPECT_EQ(f.step, 0);
  EXPECT_EQ(f.layer, 0);
  EXPECT_EQ(f.position, 1);  // position 0 is right: every rotation is the identity there
  const auto& ev = f.evidence;
  EXPECT_EQ(ev.at("hypothesis"), 1.0);
  EXPECT_EQ(ev.at("rotary_dim"), 6.0);
  EXPECT_EQ(ev.at("head_dim"), 12.0);
  EXPECT_LE(ev.at("whole_head_key_error"), ev.at("tolerance"));
  EXPECT_GT(ev.at("key_error"), 100 * ev.at("tolerance"));
  EXPECT_LT(ev.at("value_error"), 1e-4);
  EXPECT_NE(f.explanation.find("partial_rotary_factor ignored"), std::string::npos) << f.explanation;
  EXPECT_NE(f.explanation.find("position 0 is right"), std::string::npos) << f.explanation;
  for (const char* other : {finding::QkNormOrder, finding::NopeLayerRope, finding::RopeScaling,
                            finding::LayerRopeTheta})
    EXPECT_FALSE(rep.hasFinding(other)) << other << "\n" << rep.toText();
}

TEST(PartialRotary, OneLayerFromADecodeStep) {
  auto model = Model::load(phi3());
  const AuditReport rep =
      Auditor::audit(*model, test::runWithFaults(phi3(), {"partial_rotary:layer=2,step=3"})).report;
  const Finding& f = test::onlyFinding(rep, finding::PartialRotary);
  EXPECT_EQ(f.step, 3);
  EXPECT_EQ(f.layer, 2);
}

TEST(PartialRotary, ACleanRunAndACheckpointThatRotatesWholeHeads) {
  auto model = Model::load(phi3());
  const AuditReport clean = Auditor::audit(*model, test::runWithFaults(phi3(), {})).report;
  EXPECT_TRUE(clean.findings.empty()) << clean.toText();
  try {
    test::runWithFaults(test::hfModel("llama"), {"partial_rotary"});
    FAIL() << "a llama checkpoint rotates whole heads";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("partial_rotary_factor below 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("llama"), std::string::npos) << e.what();
  }
}

TEST(PartialRotary, TheThreeHypothesesSayWhatTheyCompute) {
  using kvscope::detail::PartialRotaryEvidence;
  EXPECT_NE(PartialRotaryEvidence::hypothesisText(1, 6, 12).find("theta^(-2i/12)"), std::string::npos);
  EXPECT_NE(PartialRotaryEvidence::hypothesisText(2, 6, 12).find("first 3 of 6 pairs"), std::string::npos);
  EXPECT_NE(PartialRotaryEvidence::hypothesisText(3, 6, 12).find("pairs (i, i + 3)"), std::string::npos);
}

}  // namespace
