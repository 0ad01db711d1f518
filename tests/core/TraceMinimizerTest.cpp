// Minimal reproducers (kvscope/TraceMinimizer.hpp): cutting a trace keeps a valid shorter
// run, and the greedy minimization keeps the first finding on a real audit of the
// built-in engine's faulty run (the CLI and the scenarios: tests/scenarios/minimize_test.py).
#include <gtest/gtest.h>

#include <filesystem>

#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FaultSpec.hpp"
#include "kvscope/TraceFile.hpp"
#include "kvscope/TraceMinimizer.hpp"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

struct RecordedRun {
  std::shared_ptr<Model> model;
  Trace trace;
};

// Two requests on the llama fixture, the second arriving at tick 1; optional faults.
RecordedRun twoRequests(const std::vector<std::string>& faults, bool snapshots = false) {
  RecordedRun r;
  r.model = Model::load(test::hfModel("llama"));
  RequestSpec a, b;
  a.promptIds = {0, 34, 86, 69};
  a.maxNewTokens = 6;
  a.stopAtEos = false;
  b.promptIds = {0, 316, 284};
  b.maxNewTokens = 4;
  b.arrivalTick = 1;
  b.stopAtEos = false;
  EngineOptions o;
  o.recordSnapshots = snapshots;
  for (const auto& f : faults) o.faults.push_back(FaultSpec::parse(f));
  r.trace = Engine(r.model).run({a, b}, o);
  r.model = Model::load(test::hfModel("llama"));
  return r;
}

}  // namespace

TEST(TraceMinimizer, CutKeepsAValidShorterRun) {
  const RecordedRun run = twoRequests({}, true);
  TraceCut cut;
  cut.requests = {0};
  cut.lastTick = 2;
  cut.snapshots = false;
  const Trace t = cutTrace(run.trace, cut);
  ASSERT_EQ(t.requests.size(), 1u);
  EXPECT_EQ(t.requests[0].id, 0);
  for (const auto& s : t.steps) {
    EXPECT_EQ(s.request, 0);
    EXPECT_LE(s.tick, 2);
    for (const auto& rec : s.layers) EXPECT_TRUE(rec.snapshotKeys.shape.empty());
  }
  const auto last = t.steps.back().step;
  EXPECT_EQ(t.requests[0].generated.size(), static_cast<size_t>(last + 1));
  EXPECT_EQ(t.requests[0].maxNewTokens, last + 1);
  EXPECT_EQ(t.requests[0].stopReason, "max_new_tokens");
  // Written and read back, it is the same trace, and a clean run stays clean.
  const auto path = (test::freshDir("minimizer") / "cut.kvtrace").string();
  fs::create_directories(fs::path(path).parent_path());
  TraceFile::write(t, path, true);
  const Trace back = TraceFile::read(path);
  EXPECT_EQ(back.steps.size(), t.steps.size());
  EXPECT_TRUE(Auditor::audit(*run.model, back).report.clean());
  // The identity cut changes nothing.
  EXPECT_EQ(cutTrace(run.trace, TraceCut{}), run.trace);
  EXPECT_EQ(cut.describe(), "request 0; steps up to tick 2; all layers; no snapshots");
}

TEST(TraceMinimizer, KeepsTheFirstFindingOfAFaultyRun) {
  const RecordedRun run = twoRequests({"wrong_layer:layer=2,source=1,step=2"});
  const AuditReport full = Auditor::audit(*run.model, run.trace).report;
  const auto target = minimizeTarget(full);
  ASSERT_TRUE(target);
  ASSERT_EQ(target->finding.id, "wrong_layer");
  int audits = 0;
  const MinimizedTrace m =
      minimizeTrace(run.trace, nullptr, full, [&](const Trace& t, const Trace*) {
        ++audits;
        return Auditor::audit(*run.model, t).report;
      });
  EXPECT_EQ(m.audits, audits);
  EXPECT_TRUE(showsTarget(m.report, *target));
  EXPECT_LT(m.trace.steps.size(), run.trace.steps.size());
  for (const auto& s : m.trace.steps) EXPECT_LE(s.step, target->finding.step + 2);
  // What the minimized trace reports is what auditing it again reports.
  EXPECT_TRUE(showsTarget(Auditor::audit(*run.model, m.trace).report, *target));
}

TEST(TraceMinimizer, CleanReportHasNothingToMinimize) {
  const RecordedRun run = twoRequests({});
  const AuditReport clean = Auditor::audit(*run.model, run.trace).report;
  EXPECT_FALSE(minimizeTarget(clean));
  EXPECT_THROW(minimizeTrace(run.trace, nullptr, clean,
                             [](const Trace&, const Trace*) { return AuditReport{}; }),
               UsageError);
}

TEST(TraceMinimizer, ReproduceCommandQuotesAndNamesEveryOption) {
  AuditJobSpec spec;
  spec.modelDir = "models/my model";
  addWeightsVersion(spec, "1=ckpt/v1");
  spec.options.toleranceScale = 2.0;
  EXPECT_EQ(reproduceCommand(spec, "out/min.kvtrace"),
            "kvscope-cli audit --model 'models/my model' --trace out/min.kvtrace --weights-version "
            "1=ckpt/v1 "
            "--tolerance-scale 2");
  AuditJobSpec pair;
  EXPECT_EQ(reproduceCommand(pair, "min.kvtrace", referencePathFor("min.kvtrace")),
            "kvscope-cli audit --reference-trace min.reference.kvtrace --trace min.kvtrace");
  EXPECT_EQ(referencePathFor("a/b.kvtrace"), "a/b.reference.kvtrace");
}
