// Speculative decoding in the built-in engine and the trace: drafts verified in one forward,
// rejected ones rolled back; the speculative_rollback fault keeps them. Round trips of the
// draft_count / accepted_count columns, their validation, and the audit in every mode.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "ScratchDir.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "kvscope/FaultSpec.hpp"
#include "kvscope/SafetensorsFile.hpp"
#include "kvscope/TraceFile.hpp"

using namespace kvscope;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path speculativeDir() { return test::scratchDir("speculative"); }

// gpt2 fixture: 3 drafts per step, 2 of 3 accepted at step 1 (then 1 of 3, 1 of 2).
const std::vector<int64_t> kLookupPrompt = {324, 86, 78, 422, 324, 86, 78};

std::shared_ptr<Model> gpt2() { return Model::load(test::hfModel("gpt2")); }

Trace runSpeculative(int64_t drafts, const std::vector<std::string>& faults = {},
                     bool snapshots = false, bool uncached = false) {
  RequestSpec s;
  s.promptIds = kLookupPrompt;
  s.maxNewTokens = 12;
  s.stopAtEos = false;
  EngineOptions o;
  o.speculativeDrafts = drafts;
  o.recordSnapshots = snapshots;
  o.uncached = uncached;
  for (const auto& f : faults) o.faults.push_back(FaultSpec::parse(f));
  return Engine(gpt2()).run({s}, o);
}

std::string writeSpeculativeTrace(const Trace& t, const std::string& name) {
  const auto path = (speculativeDir() / name).string();
  TraceFile::write(t, path, true);
  return path;
}

std::string readError(const std::string& path, std::string* field) {
  try {
    TraceFile::read(path);
  } catch (const InputError& e) {
    *field = e.field();
    return e.what();
  }
  ADD_FAILURE() << "no InputError for " << path;
  return "";
}

}  // namespace

TEST(SpeculativeDecoding, GreedyOutputEqualsPlainDecodingAndFewerForwards) {
  const Trace plain = runSpeculative(0), spec = runSpeculative(3);
  EXPECT_EQ(spec.requests[0].generated, plain.requests[0].generated);
  EXPECT_LT(spec.steps.size(), plain.steps.size());
  int64_t partial = 0;
  for (const auto& s : spec.steps) {
    if (s.step == 0) continue;
    EXPECT_EQ(static_cast<int64_t>(s.fedIds.size()), 1 + s.draftCount);
    // After the rollback the cache holds the fed token and the accepted drafts only.
    const int64_t before = s.positions.front();
    for (const auto& l : s.layers) EXPECT_EQ(l.cacheLength, before + 1 + s.acceptedCount) << s;
    partial += s.acceptedCount > 0 && s.acceptedCount < s.draftCount ? 1 : 0;
  }
  EXPECT_GE(partial, 1) << "the prompt should give partly accepted drafts";
}

TEST(SpeculativeDecoding, TraceRoundTripKeepsDraftsAndAcceptance) {
  for (bool snapshots : {false, true}) {
    const Trace t = runSpeculative(3, {}, snapshots);
    const auto path = writeSpeculativeTrace(t, snapshots ? "spec-snap.kvtrace" : "spec.kvtrace");
    EXPECT_EQ(TraceFile::read(path), t);
    const json steps = json::parse(SafetensorsFile::open(path)->metadata().at("kvtrace"))["steps"];
    ASSERT_TRUE(steps.contains("draft_count"));
    EXPECT_EQ(steps["draft_count"][1], t.steps[1].draftCount);
    EXPECT_EQ(steps["accepted_count"][1], t.steps[1].acceptedCount);
  }
  // A run without speculation writes neither column (files stay what older readers know).
  const auto plain = writeSpeculativeTrace(runSpeculative(0), "plain.kvtrace");
  const json steps = json::parse(SafetensorsFile::open(plain)->metadata().at("kvtrace"))["steps"];
  EXPECT_FALSE(steps.contains("draft_count"));
  EXPECT_FALSE(steps.contains("accepted_count"));
}

TEST(SpeculativeDecoding, ReaderValidatesTheDraftColumns) {
  const auto in = writeSpeculativeTrace(runSpeculative(3), "spec-valid.kvtrace");
  std::string field;
  const auto bad = (speculativeDir() / "accepted-too-many.kvtrace").string();
  test::rewriteTrace(in, bad, [](json& d) { d["steps"]["accepted_count"][1] = 4; });
  EXPECT_NE(readError(bad, &field).find("outside"), std::string::npos);
  EXPECT_EQ(field, "steps.accepted_count[1]");
  const auto tooLong = (speculativeDir() / "draft-too-long.kvtrace").string();
  test::rewriteTrace(in, tooLong, [](json& d) { d["steps"]["draft_count"][1] = 9; });
  readError(tooLong, &field);
  EXPECT_EQ(field, "steps.draft_count[1]");
  const auto wrongCount = (speculativeDir() / "draft-column-short.kvtrace").string();
  test::rewriteTrace(in, wrongCount, [](json& d) { d["steps"]["draft_count"].erase(0); });
  readError(wrongCount, &field);
  EXPECT_EQ(field, "steps.draft_count");
}

TEST(SpeculativeDecoding, CorrectRollbackAuditsCleanInEveryMode) {
  const Trace t = runSpeculative(3);
  auto model = gpt2();
  const auto result = Auditor::audit(*model, t);
  EXPECT_TRUE(result.report.clean()) << result.report.toText();
  EXPECT_TRUE(result.report.findings.empty()) << result.report.toText();
  // Read back, and with the cache lengths left for the reader to derive (it assumes the
  // rollback), and as a full-snapshot trace (appended records derived from snapshots).
  const auto derived = (speculativeDir() / "spec-derived.kvtrace").string();
  test::rewriteTrace(writeSpeculativeTrace(t, "spec-audit.kvtrace"), derived,
                     [](json& d) { d["steps"].erase("cache_lengths"); });
  EXPECT_TRUE(Auditor::audit(*model, TraceFile::read(derived)).report.clean());
  Trace snapOnly = runSpeculative(3, {}, true);
  for (auto& s : snapOnly.steps)
    for (auto& l : s.layers) l.keys = l.values = FloatTensor();
  const Trace snapBack = TraceFile::read(writeSpeculativeTrace(snapOnly, "spec-snaponly.kvtrace"));
  const auto snap = Auditor::audit(*model, snapBack);
  EXPECT_TRUE(snap.report.clean()) << snap.report.toText();
  // trace+trace against the uncached engine's run.
  const auto pair = Auditor::auditTraces(runSpeculative(0, {}, false, true), t);
  EXPECT_TRUE(pair.report.clean()) << pair.report.toText();
}

TEST(SpeculativeDecoding, SkippedRollbackIsDiagnosedWithTheRejectedDraftsAsEvidence) {
  const Trace t = runSpeculative(3, {"speculative_rollback:layer=1,step=1"});
  const TraceStep& s1 = t.steps.at(1);
  ASSERT_EQ(s1.step, 1);
  ASSERT_GT(s1.rejectedCount(), 0);
  const int64_t before = s1.positions.front();
  EXPECT_EQ(s1.layers[0].cacheLength, before + 1 + s1.acceptedCount);
  EXPECT_EQ(s1.layers[1].cacheLength, before + 1 + s1.draftCount);
  auto model = gpt2();
  const auto r =
      Auditor::audit(*model, TraceFile::read(writeSpeculativeTrace(t, "spec-fault.kvtrace")))
          .report;
  ASSERT_FALSE(r.findings.empty()) << r.toText();
  const Finding& f = r.findings.front();
  EXPECT_EQ(f.id, finding::SpeculativeRollback) << r.toText();
  EXPECT_EQ(f.step, 1);
  EXPECT_EQ(f.layer, 1);
  EXPECT_EQ(r.findings.size(), 1u) << r.toText();
  EXPECT_EQ(r.firstDivergence.step, 1);
  EXPECT_EQ(r.firstDivergence.layer, 1);
  EXPECT_EQ(f.evidence.at("rejected"), static_cast<double>(s1.rejectedCount()));
  EXPECT_EQ(f.evidence.at("extra_rows"), static_cast<double>(s1.rejectedCount()));
  EXPECT_EQ(f.evidence.at("first_rejected_position"),
            static_cast<double>(before + 1 + s1.acceptedCount));
  // The extra rows are the rejected drafts' projections, not the stream's tokens there.
  EXPECT_LE(f.evidence.at("extra_rows_vs_draft_projection"), f.evidence.at("tolerance"));
  EXPECT_GT(f.evidence.at("extra_rows_vs_stream_reference"), 100 * f.evidence.at("tolerance"));
  EXPECT_EQ(r.stages[1].status, StageStatus::Fail);
  // trace+trace: the same finding, its values not compared (no model).
  const auto pair = Auditor::auditTraces(runSpeculative(0, {}, false, true), t).report;
  ASSERT_FALSE(pair.findings.empty()) << pair.toText();
  EXPECT_EQ(pair.findings.front().id, finding::SpeculativeRollback) << pair.toText();
  EXPECT_EQ(pair.findings.front().step, 1);
  EXPECT_EQ(pair.findings.front().layer, 1);
}

TEST(SpeculativeDecoding, FaultIsDocumentedAndValidated) {
  EXPECT_NE(FaultSpec::helpText().find("speculative_rollback"), std::string::npos);
  EXPECT_NO_THROW(FailureMatrix::row(finding::SpeculativeRollback));
  EXPECT_THROW(runSpeculative(3, {"speculative_rollback:layer=7"}), UsageError);
  EXPECT_THROW(runSpeculative(0, {"speculative_rollback:draft=0"}), UsageError);
}
