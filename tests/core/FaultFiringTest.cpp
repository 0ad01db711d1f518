// Every injected fault says whether and where it fired, or why it never could (issue 27
// item 3): the engine records it, the trace keeps it (older traces read as not recorded), and
// the audit's text and JSON report it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "AuditExpectations.hpp"
#include "TestSupport.hpp"
#include "kvscope/KvScope.hpp"

using namespace kvscope;

namespace {

Trace runWith(const std::vector<std::vector<int64_t>>& prompts, const std::string& fault,
              int64_t maxNew = 6) {
  auto model = Model::load(test::hfModel("llama"));
  std::vector<RequestSpec> specs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestSpec s;
    s.promptIds = prompts[i];
    s.maxNewTokens = maxNew;
    s.stopAtEos = false;
    s.arrivalTick = static_cast<int64_t>(i);
    specs.push_back(s);
  }
  EngineOptions o;
  o.faults = {FaultSpec::parse(fault)};
  return Engine(model).run(specs, o);
}

const std::vector<std::vector<int64_t>> kUnrelated = {{0, 34, 86, 69, 301, 291, 938},
                                                      {0, 316, 284, 117, 309}};

}  // namespace

TEST(FaultFiring, PrefixReuseOnPromptsSharingNoBlockSaysWhy) {
  const Trace t = runWith(kUnrelated, "prefix_reuse");
  ASSERT_EQ(t.faultFirings.size(), 1u);
  EXPECT_FALSE(t.faultFirings[0].fired);
  EXPECT_NE(t.faultFirings[0].reason.find("no two prompts share a full block of 4 tokens"),
            std::string::npos)
      << t.faultFirings[0].reason;
  const AuditReport rep = Auditor::audit(*Model::load(test::hfModel("llama")), t).report;
  EXPECT_TRUE(rep.clean()) << rep.toText();
  EXPECT_NE(rep.toText().find("prefix_reuse:block=4,layer=-1,request=-1: never fired: no two"),
            std::string::npos)
      << rep.toText();
  const nlohmann::json j = rep.toJson();
  ASSERT_EQ(j["faults"].size(), 1u);
  EXPECT_EQ(j["faults"][0]["fired"], false);
  EXPECT_NE(j["faults"][0]["why"].get<std::string>().find("full block"), std::string::npos);
}

TEST(FaultFiring, PrefixReuseThatHandsOverAWrongBlockFiresAtTheLookup) {
  // The second prompt differs from the first only at the first block's last token.
  const Trace t = runWith({{5, 6, 7, 8, 9, 10, 11}, {5, 6, 7, 99, 9, 10, 11}}, "prefix_reuse");
  ASSERT_EQ(t.faultFirings.size(), 1u);
  EXPECT_TRUE(t.faultFirings[0].fired) << t.faultFirings[0].reason;
  EXPECT_EQ(t.faultFirings[0].request, 1);
  EXPECT_EQ(t.faultFirings[0].step, 0);
  // Prompts sharing whole blocks: the lookup is right, so the fault changed nothing.
  const Trace same = runWith({{5, 6, 7, 8, 9, 10, 11}, {5, 6, 7, 8, 9, 10, 12}}, "prefix_reuse");
  ASSERT_EQ(same.faultFirings.size(), 1u);
  EXPECT_FALSE(same.faultFirings[0].fired);
  EXPECT_NE(same.faultFirings[0].reason.find("matched in full"), std::string::npos)
      << same.faultFirings[0].reason;
}

TEST(FaultFiring, DuplicateAppendFiresAtItsStepAndLayerOrSaysNoStepReachedIt) {
  const Trace t = runWith(kUnrelated, "duplicate_append:layer=1,step=2");
  ASSERT_EQ(t.faultFirings.size(), 1u);
  EXPECT_EQ(t.faultFirings[0], (FaultFiring{true, 0, 2, 1, ""}));
  EXPECT_EQ(t.faultFirings[0].describe(), "fired at request 0, step 2, layer 1");
  const Trace late = runWith(kUnrelated, "duplicate_append:step=50");
  ASSERT_EQ(late.faultFirings.size(), 1u);
  EXPECT_FALSE(late.faultFirings[0].fired);
  EXPECT_EQ(late.faultFirings[0].reason, "no step reached step=50 (the last was step 5)");  // steps 0..5
}

TEST(FaultFiring, GreedyRunsSayTheRngFaultsHadNothingToChange) {
  const Trace t = runWith(kUnrelated, "rng_reseed");
  ASSERT_EQ(t.faultFirings.size(), 1u);
  EXPECT_FALSE(t.faultFirings[0].fired);
  EXPECT_EQ(t.faultFirings[0].reason, "every request is greedy: no random draw to change");
}

TEST(FaultFiring, TheTraceKeepsTheRecordAndOlderTracesReadAsNotRecorded) {
  const Trace t = runWith(kUnrelated, "duplicate_append:layer=1,step=2");
  const Trace back = test::writtenAndRead(t, "fault-firing", "firing.kvtrace");
  EXPECT_EQ(back.faultFirings, t.faultFirings);
  const AuditReport rep = Auditor::audit(*Model::load(test::hfModel("llama")), back).report;
  EXPECT_EQ(rep.toJson()["faults"][0]["fired"], true);
  EXPECT_EQ(rep.toJson()["faults"][0]["where"]["step"], 2);
  // A trace written before the record: its faults are listed, their firing not recorded.
  const Trace old = TraceFile::read(test::fixture("traces-v1/llama-engine-snapshots.kvtrace"));
  EXPECT_TRUE(old.faultFirings.empty());
  AuditReport r;
  r.faults = {"duplicate_append:layer=1,request=-1,step=2"};
  EXPECT_NE(r.faultLine(0).find("not recorded"), std::string::npos);
  EXPECT_TRUE(r.toJson()["faults"][0]["fired"].is_null());
}
