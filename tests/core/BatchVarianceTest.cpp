// batch_variance (KV Scope's addition): a request whose logits change with its batch mates
// although nothing is shared. Audited trace against trace: the same prompts run alone (the
// reference trace, a cached run) and in a batch. Batch-invariant batching reproduces the solo
// run bit for bit; the fault (a split-K projection chosen by the batch size) is found at its
// step and layer; left-padded batching, whose GEMMs see other row counts, is batch-variant.
#include <gtest/gtest.h>

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "AuditExpectations.hpp"
#include "ScratchDir.hpp"
#include "TestSupport.hpp"
#include "kvscope/KvScope.hpp"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

enum class Batching { Alone, Padded, Invariant };

std::string pathFor(const std::string& model, Batching batching, size_t faults, bool uncached) {
  return (test::scratchDir("batch-variance") /
          (model + "-" + std::to_string(static_cast<int>(batching)) + "-" + std::to_string(faults) +
           (uncached ? "-uncached" : "") + ".kvtrace"))
      .string();
}

// The model's first two golden prompts, 6 new tokens each, arriving together.
Trace runPair(const std::string& model, Batching batching,
              const std::vector<std::string>& faults = {}, bool uncached = false) {
  auto m = Model::load(test::hfModel(model));
  const auto golden = test::goldenJson(model);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 2; ++i) {
    RequestSpec s;
    s.promptIds = golden["prompts"][i]["ids"].get<std::vector<int64_t>>();
    s.maxNewTokens = 6;
    s.stopAtEos = false;
    s.batchGroup = batching == Batching::Alone ? -1 : 0;
    specs.push_back(s);
  }
  EngineOptions o;
  o.uncached = uncached;
  o.batchInvariant = batching == Batching::Invariant;
  for (const auto& f : faults) o.faults.push_back(FaultSpec::parse(f));
  // Written and read back, as another engine's traces arrive.
  const auto path = pathFor(model, batching, faults.size(), uncached);
  fs::remove(path);
  TraceFile::write(Engine(m).run(specs, o), path);
  return TraceFile::read(path);
}

TEST(BatchVariance, MatrixRowIsKvScopesAddition) {
  EXPECT_NE(FailureMatrix::row(finding::BatchVariance).observation.find("solo run"),
            std::string::npos);
  test::expectAdditionAfter(finding::BatchVariance, finding::ChunkPosition);
}

TEST(BatchVariance, InvariantBatchingReproducesTheSoloRunBitForBit) {
  for (const std::string model : {"gpt2", "llama"}) {
    const Trace alone = runPair(model, Batching::Alone),
                batched = runPair(model, Batching::Invariant);
    ASSERT_EQ(batched.requests[0].batchGroup, 0);
    const AuditReport rep = Auditor::auditTraces(alone, batched).report;
    EXPECT_EQ(rep.verdict, "clean") << rep.toText();
    EXPECT_TRUE(rep.findings.empty()) << rep.toText();
    const std::string lines = test::allStageChecks(rep);
    EXPECT_NE(lines.find("ok: request 0 reproduces its solo run bit for bit"), std::string::npos)
        << lines;
    EXPECT_NE(lines.find("ok: request 1 reproduces its solo run bit for bit"), std::string::npos)
        << lines;
  }
}

TEST(BatchVariance, SplitKFaultIsFoundAtItsStepAndLayer) {
  struct Case {
    std::string model;
    int64_t step, layer;
  };
  std::ostringstream table;
  table << "built-in engine, batch_variance (trace+trace against the solo runs):\n"
        << std::left << std::setw(8) << "model" << std::setw(18) << "fault" << std::setw(24)
        << "got"
        << "first\n";
  for (const Case& c : {Case{"gpt2", 1, 0}, Case{"gpt2", 3, 1}, Case{"llama", 1, 0},
                        Case{"llama", 3, 2}, Case{"llama", 0, 1}}) {
    SCOPED_TRACE(c.model + " step " + std::to_string(c.step) + " layer " + std::to_string(c.layer));
    const Trace alone = runPair(c.model, Batching::Alone);
    const Trace batched = runPair(
        c.model, Batching::Invariant,
        {"batch_variance:step=" + std::to_string(c.step) + ",layer=" + std::to_string(c.layer)});
    const AuditReport rep = Auditor::auditTraces(alone, batched).report;
    EXPECT_EQ(rep.verdict, "divergent") << rep.toText();
    ASSERT_TRUE(rep.hasFinding(finding::BatchVariance)) << rep.toText();
    for (const auto& f : rep.findings) {
      EXPECT_EQ(f.id, finding::BatchVariance) << rep.toText();  // nothing else, no drift
      EXPECT_EQ(f.step, c.step);
      EXPECT_EQ(f.layer, c.layer);
      EXPECT_GT(f.evidence.at("max_logit_difference"), 0.0);
      EXPECT_LT(f.evidence.at("logit_error_over_tolerance"), 1.0);  // float noise
      EXPECT_EQ(f.evidence.at("bitwise_equal_steps"), static_cast<double>(c.step));
      EXPECT_EQ(f.evidence.at("batch_mates"), 1.0);
    }
    EXPECT_TRUE(rep.firstDivergence.present);
    EXPECT_EQ(rep.firstDivergence.step, c.step);
    EXPECT_EQ(rep.firstDivergence.layer, c.layer);
    std::string got;
    for (const auto& f : rep.findings) got += (got.empty() ? "" : ", ") + f.id;
    table << std::setw(8) << c.model << std::setw(18)
          << ("s" + std::to_string(c.step) + " L" + std::to_string(c.layer)) << std::setw(24)
          << (got.empty() ? "-" : got)
          << ("s" + std::to_string(rep.firstDivergence.step) + " L" +
              std::to_string(rep.firstDivergence.layer))
          << "\n";
  }
  std::cout << table.str();
}

// Left-padded batching multiplies the batch's rows together (a decode GEMM of two rows where
// the solo run has one): the default batched engine is batch-variant. Which step first
// differs is the BLAS's choice (here: the first decode step), so only the finding is checked.
TEST(BatchVariance, PaddedBatchingIsBatchVariant) {
  const Trace alone = runPair("llama", Batching::Alone),
              padded = runPair("llama", Batching::Padded);
  const AuditReport rep = Auditor::auditTraces(alone, padded).report;
  EXPECT_EQ(rep.verdict, "divergent") << rep.toText();
  // Both batched requests differ from their solo runs: one finding each, at its own onset.
  ASSERT_EQ(rep.findings.size(), 2u) << rep.toText();
  std::set<int64_t> requests;
  for (const auto& f : rep.findings) {
    EXPECT_EQ(f.id, finding::BatchVariance);
    requests.insert(f.request);
    EXPECT_LT(f.evidence.at("logit_error_over_tolerance"), 1.0);
  }
  EXPECT_EQ(requests, (std::set<int64_t>{0, 1})) << rep.toText();
}

// Against an uncached reference trace, differences are the cached path's precision, not the
// batch: not checked, and no batch_variance.
TEST(BatchVariance, UncachedReferenceIsNotABatchComparison) {
  const Trace reference = runPair("llama", Batching::Alone, {}, /*uncached=*/true);
  const Trace batched = runPair("llama", Batching::Invariant, {"batch_variance:step=1,layer=0"});
  const AuditReport rep = Auditor::auditTraces(reference, batched).report;
  EXPECT_FALSE(rep.hasFinding(finding::BatchVariance)) << rep.toText();
  EXPECT_NE(test::allStageChecks(rep).find("not checked: request 0 ran batched with request 1, but the "
                                 "reference trace is uncached"),
            std::string::npos)
      << test::allStageChecks(rep);
}

// The inspector's position timeline: the batch at the first step, the onset as an alarm.
TEST(BatchVariance, TimelineMarksTheBatchAndTheOnset) {
  runPair("llama", Batching::Alone);
  runPair("llama", Batching::Invariant, {"batch_variance:step=2,layer=1"});
  AuditJobSpec spec;
  spec.referenceTraceFile = pathFor("llama", Batching::Alone, 0, false);
  spec.traceFile = pathFor("llama", Batching::Invariant, 1, false);
  const RequestTimeline tl =
      Inspector(std::make_shared<const AuditJobOutput>(runAuditJob(spec))).timeline(0);
  std::vector<const TimelineMarker*> batch, onset;
  for (const auto& m : tl.markers) {
    if (m.kind == "batch") batch.push_back(&m);
    if (m.kind == "batch_variance") onset.push_back(&m);
  }
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch.front()->label, "batch group 0: 2 requests");
  EXPECT_FALSE(batch.front()->alarm);
  ASSERT_EQ(onset.size(), 1u);
  EXPECT_EQ(onset.front()->step, 2);
  EXPECT_TRUE(onset.front()->alarm);
  EXPECT_EQ(onset.front()->label, "differs from its solo run from layer 1");
}

TEST(BatchVariance, FaultNeedsABatch) {
  auto m = Model::load(test::hfModel("gpt2"));
  RequestSpec s;
  s.promptIds = {0, 34, 86};
  s.maxNewTokens = 2;
  EngineOptions o;
  o.faults.push_back(FaultSpec::parse("batch_variance:step=1,layer=0"));
  EXPECT_THROW(Engine(m).run({s}, o), UsageError);
  o.faults = {FaultSpec::parse("batch_variance:step=1,layer=7")};
  s.batchGroup = 0;
  EXPECT_THROW(Engine(m).run({s, s}, o), UsageError);
}

}  // namespace
