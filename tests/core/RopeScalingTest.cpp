// rope_scaling (KV Scope's addition): a path that rotates keys with another RoPE scaling than
// the checkpoint's. The fault drops the scaling; traces written by "another engine" (a
// checkpoint with another scaling, fingerprint unknown) apply it twice or linearly instead of
// llama3; the evidence says which, and a dropped linear factor (the right key at 2p) and a
// real position offset on a scaled checkpoint keep their own findings.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "AuditExpectations.hpp"
#include "RopeScalingCheckpoint.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "kvscope/FaultSpec.hpp"
#include "kvscope/TraceFile.hpp"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

// The llama golden prompt, 8 new tokens; `uncached`: the reference engine's trace.
Trace runRope(const std::string& dir, const std::vector<std::string>& faults = {},
              bool uncached = false) {
  auto m = Model::load(dir);
  RequestSpec s;
  s.promptIds = test::goldenJson("llama")["prompts"][0]["ids"].get<std::vector<int64_t>>();
  s.maxNewTokens = 8;
  s.stopAtEos = false;
  EngineOptions o;
  o.uncached = uncached;
  for (const auto& f : faults) o.faults.push_back(FaultSpec::parse(f));
  return Engine(m).run({s}, o);
}

TEST(RopeScaling, MatrixRowIsKvScopesAddition) {
  const auto& row = FailureMatrix::row(finding::RopeScaling);
  EXPECT_EQ(row.observation, "key error grows with position while values at layer 0 are exact");
  // Listed among KV Scope's additions, after the ones added before it.
  test::expectAdditionAfter(finding::RopeScaling, finding::KvQuantization);
}

TEST(RopeScaling, DroppedLinearFactorIsNotAPositionOffset) {
  const std::string dir = test::ropeScalingLlama("linear");
  auto model = Model::load(dir);
  const Trace t = test::writtenAndRead(runRope(dir, {"rope_scaling:layer=0,step=2"}),
                                       "rope-scaling-traces", "linear-dropped.kvtrace");
  const AuditReport rep = Auditor::audit(*model, t).report;
  const Finding& f = test::onlyFinding(rep, finding::RopeScaling);
  EXPECT_EQ(f.step, 2);
  EXPECT_EQ(f.layer, 0);
  EXPECT_FALSE(rep.hasFinding(finding::Position)) << rep.toText();
  const auto& ev = f.evidence;
  EXPECT_EQ(ev.at("hypothesis"), 1.0);  // the factor dropped
  EXPECT_EQ(ev.at("rope_factor"), 2.0);
  EXPECT_LE(ev.at("rerotated_key_error"), ev.at("tolerance"));
  EXPECT_GT(ev.at("key_error"), 100 * ev.at("tolerance"));
  EXPECT_LT(ev.at("value_error"), 1e-4);
  // The dropped factor puts position p where the checkpoint puts 2p.
  EXPECT_EQ(ev.at("equivalent_position"), 2 * ev.at("first_position"));
  EXPECT_EQ(ev.at("first_position"), static_cast<double>(f.position));
  // Every later step's key at layer 0 is reproduced too (6 decode steps from step 2).
  EXPECT_EQ(ev.at("records_compared"), 6.0);
  EXPECT_NEAR(ev.at("radians_per_position"), 0.5, 1e-6);  // 1 - 1/2 on the fastest pair
  EXPECT_NE(f.explanation.find("scaling dropped"), std::string::npos) << f.explanation;
  EXPECT_NE(f.explanation.find("right key at position"), std::string::npos) << f.explanation;
}

TEST(RopeScaling, Llama3DroppedAtADeeperLayerKeepsLayer0Exact) {
  const std::string dir = test::ropeScalingLlama("llama3");
  auto model = Model::load(dir);
  const AuditReport rep =
      Auditor::audit(*model, runRope(dir, {"rope_scaling:layer=1,step=3"})).report;
  const Finding& f = test::onlyFinding(rep, finding::RopeScaling);
  EXPECT_EQ(f.step, 3);
  EXPECT_EQ(f.layer, 1);
  EXPECT_EQ(f.evidence.at("hypothesis"), 1.0);
  EXPECT_LT(f.evidence.at("layer0_value_error"), 1e-4);
  EXPECT_EQ(f.evidence.count("equivalent_position"), 0u);  // llama3: no single position fits
  EXPECT_NE(f.explanation.find("llama3 (factor 8"), std::string::npos) << f.explanation;
}

// Another engine's trace: keys rotated with the factor applied twice (linear 4 where the
// checkpoint says 2), llama3's factor applied linearly, or the factor inverted. Its checkpoint is
// not ours, so its fingerprint is unknown.
TEST(RopeScaling, OtherScalingsFromAnotherEngine) {
  struct Row {
    std::string recorded, audited;
    double hypothesis;
    const char* words;
  };
  const std::vector<Row> rows = {
      {test::ropeScalingLlama("linear", 4), test::ropeScalingLlama("linear"), 2, "applied twice"},
      {test::ropeScalingLlama("linear", 8), test::ropeScalingLlama("llama3"), 3,
       "linear scaling by the same factor instead of llama3"},
      // A fused kernel that multiplies by the factor where the prefill divides
      // (mit-han-lab/llm-awq#334): linear 1/2 where the checkpoint says 2.
      {test::ropeScalingLlama("linear", 0.5), test::ropeScalingLlama("linear"), 4, "inverted"}};
  for (const auto& r : rows) {
    Trace t = runRope(r.recorded);
    t.model.fingerprint.clear();
    t.engine = "another engine";
    auto model = Model::load(r.audited);
    const AuditReport rep =
        Auditor::audit(*model, test::writtenAndRead(t, "rope-scaling-traces", "other.kvtrace"))
            .report;
    const Finding& f = test::onlyFinding(rep, finding::RopeScaling);
    EXPECT_EQ(f.step, 0) << r.words;  // the prefill already rotates every prompt key
    EXPECT_EQ(f.layer, 0) << r.words;
    EXPECT_EQ(f.evidence.at("hypothesis"), r.hypothesis) << r.words;
    EXPECT_EQ(f.evidence.at("first_position"), 1.0);  // position 0 rotates by nothing
    EXPECT_NE(f.explanation.find(r.words), std::string::npos) << f.explanation;
  }
}

// An engine that applies positions 3 too high while recording the right ones: on a linear
// checkpoint the keys are the right ones of another position, not another scaling.
TEST(RopeScaling, PositionOffsetOnAScaledCheckpointStaysPosition) {
  const std::string dir = test::ropeScalingLlama("linear");
  Trace t = runRope(dir, {"wrong_position:offset=3,step=1"});
  for (auto& s : t.steps)
    if (s.step >= 1)
      for (auto& p : s.positions) p -= 3;
  t.faults.clear();
  auto model = Model::load(dir);
  const AuditReport rep = Auditor::audit(*model, t).report;
  const Finding& f = test::onlyFinding(rep, finding::Position);
  EXPECT_EQ(f.step, 1);
  EXPECT_EQ(f.evidence.at("offset"), 3.0);
  EXPECT_FALSE(rep.hasFinding(finding::RopeScaling));
}

// The trace carries the engine's RoPE scaling (model.rope_parameters), so a trace+trace
// audit without the checkpoint can re-rotate the reference trace's keys.
TEST(RopeScaling, TraceCarriesTheScalingForTracePlusTrace) {
  const std::string dir = test::ropeScalingLlama("llama3");
  const Trace reference = test::writtenAndRead(runRope(dir, {}, true), "rope-scaling-traces",
                                               "llama3-uncached.kvtrace");
  ASSERT_TRUE(reference.model.rope.has_value());
  EXPECT_EQ(reference.model.rope->type, "llama3");
  EXPECT_EQ(reference.model.rope->originalMaxPositions, 64);
  const Trace cached = test::writtenAndRead(runRope(dir, {"rope_scaling:layer=2,step=3"}),
                                            "rope-scaling-traces", "llama3-cached.kvtrace");
  const AuditReport rep = Auditor::auditTraces(reference, cached).report;
  const Finding& f = test::onlyFinding(rep, finding::RopeScaling);
  EXPECT_EQ(f.step, 3);
  EXPECT_EQ(f.layer, 2);
  EXPECT_EQ(f.evidence.at("hypothesis"), 1.0);
  // Without the field the audit cannot re-derive the scaling: no rope_scaling finding.
  Trace unknown = cached;
  unknown.model.rope.reset();
  EXPECT_FALSE(Auditor::auditTraces(reference, unknown).report.hasFinding(finding::RopeScaling));
  // Default RoPE and gpt2 write no field; a malformed one is refused naming the field.
  EXPECT_FALSE(runRope(test::hfModel("llama")).model.rope.has_value());
  const auto path = (test::scratchDir("rope-scaling-traces") / "llama3-cached.kvtrace").string();
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> bad = {
      {[](nlohmann::json& d) { d["model"]["rope_parameters"]["rope_type"] = "yarn2"; },
       "model.rope_parameters.rope_type"},
      {[](nlohmann::json& d) { d["model"]["rope_parameters"]["factor"] = -2; },
       "model.rope_parameters.factor"},
      {[](nlohmann::json& d) {
         d["model"]["rope_parameters"].erase("original_max_position_embeddings");
       },
       "model.rope_parameters.original_max_position_embeddings"},
      {[](nlohmann::json& d) { d["model"]["rope_parameters"] = 8; }, "model.rope_parameters"}};
  for (size_t i = 0; i < bad.size(); ++i) {
    const auto out =
        (test::scratchDir("rope-scaling-traces") / ("bad" + std::to_string(i) + ".kvtrace"))
            .string();
    test::rewriteTrace(path, out, bad[i].first);
    try {
      TraceFile::read(out);
      ADD_FAILURE() << "accepted " << bad[i].second;
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), bad[i].second) << e.what();
    }
  }
}

TEST(RopeScaling, FaultNeedsARopeScalingCheckpoint) {
  for (const char* m : {"gpt2", "llama"})
    EXPECT_THROW(runRope(test::hfModel(m), {"rope_scaling"}), UsageError) << m;
  EXPECT_THROW(FaultSpec::parse("rope_scaling:factor=2"), UsageError);
}

}  // namespace
