// Chunked prefill and chunk_position (KV Scope's addition): a prompt fed a few tokens per
// forward gives the whole prefill's tokens and audits clean; positions computed per chunk
// (restarting at 0 at a chunk boundary) are chunk_position at that chunk, with the evidence
// the row names, in model+trace and trace+trace mode; plain position offsets stay position.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "AuditExpectations.hpp"
#include "ScratchDir.hpp"
#include "TestSupport.hpp"
#include "kvscope/KvScope.hpp"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

// Request 0's golden prompt (15 tokens on gpt2, 16 on llama), 6 new tokens; greedy unless
// `temperature` > 0.
Trace run(const std::string& model, int64_t chunk, const std::vector<std::string>& faults = {},
          bool uncached = false, double temperature = 0.0) {
  auto m = Model::load(test::hfModel(model));
  RequestSpec s;
  s.promptIds = test::goldenJson(model)["prompts"][0]["ids"].get<std::vector<int64_t>>();
  s.maxNewTokens = 6;
  s.stopAtEos = false;
  s.policy.temperature = temperature;
  s.policy.seed = 77;
  EngineOptions o;
  o.prefillChunk = chunk;
  o.uncached = uncached;
  for (const auto& f : faults) o.faults.push_back(FaultSpec::parse(f));
  return Engine(m).run({s}, o);
}

AuditReport audit(const std::string& model, const Trace& t) {
  return Auditor::audit(*Model::load(test::hfModel(model)), t).report;
}

TEST(ChunkedPrefill, MatrixRowIsKvScopesAddition) {
  test::expectAdditionAfter(finding::ChunkPosition, finding::RopeScaling);  // added after it
}

TEST(ChunkedPrefill, ChunksChooseNothingUntilTheLastAndGiveTheWholePrefillsTokens) {
  for (const char* m : {"gpt2", "llama"}) {
    const Trace whole = run(m, 0),
                chunked = test::writtenAndRead(run(m, 4), "chunked-prefill-traces",
                                               std::string(m) + ".kvtrace");
    const auto prompt = static_cast<int64_t>(whole.requests[0].promptIds.size());
    const int64_t chunks = (prompt + 3) / 4;
    ASSERT_EQ(chunked.steps.size(), whole.steps.size() + static_cast<size_t>(chunks - 1)) << m;
    for (int64_t i = 0; i < chunks; ++i) {
      const TraceStep& s = chunked.steps[static_cast<size_t>(i)];
      EXPECT_EQ(s.step, i) << m;
      EXPECT_EQ(s.tick, i) << m;  // one chunk per tick
      EXPECT_EQ(s.positions.front(), 4 * i) << m;
      EXPECT_EQ(s.chosenToken >= 0, i == chunks - 1) << m;
      EXPECT_EQ(s.logits.empty(), i < chunks - 1) << m;
    }
    EXPECT_EQ(chunked.requests[0].generated, whole.requests[0].generated) << m;
    EXPECT_EQ(chunked.steps[static_cast<size_t>(chunks)].step, chunks) << m;  // first decode
    const AuditReport rep = audit(m, chunked);
    EXPECT_TRUE(rep.clean() && rep.findings.empty()) << m << "\n" << rep.toText();
    // Against the uncached engine's trace: the chunks compare by stream position.
    const AuditReport pair = Auditor::auditTraces(run(m, 0, {}, true), chunked).report;
    EXPECT_TRUE(pair.clean() && pair.findings.empty()) << m << "\n" << pair.toText();
    // Sampled: the runs' choices pair up by the token they chose, not by step number.
    const AuditReport sampled =
        Auditor::auditTraces(run(m, 0, {}, true, 1.5), run(m, 4, {}, false, 1.5)).report;
    EXPECT_TRUE(sampled.clean() && sampled.findings.empty()) << m << "\n" << sampled.toText();
  }
}

TEST(ChunkedPrefill, RestartedIdsAreChunkPositionWithTheirEvidence) {
  for (const char* m : {"gpt2", "llama"}) {
    const Trace t = run(m, 4, {"chunk_position:chunk=2"});
    EXPECT_EQ(t.steps[2].positions.front(), 0) << m;
    const AuditReport rep = audit(m, t);
    const Finding& f = test::onlyFinding(rep, finding::ChunkPosition);
    EXPECT_EQ(f.step, 2) << m;
    EXPECT_EQ(f.layer, 0) << m;
    EXPECT_EQ(f.position, 8) << m;
    const auto& ev = f.evidence;
    EXPECT_EQ(ev.at("chunk"), 2) << m;
    EXPECT_EQ(ev.at("chunk_start"), 8) << m;
    EXPECT_EQ(ev.at("offset"), -8) << m;
    EXPECT_EQ(ev.at("restarted"), 1) << m;
    EXPECT_EQ(ev.at("earlier_chunks_exact"), 1) << m;
    EXPECT_LE(ev.at("records_vs_chunk_positions"), ev.at("tolerance")) << m;
    EXPECT_LE(ev.at("layer0_key_vs_chunk_positions"), ev.at("tolerance")) << m;
    EXPECT_GT(ev.at("layer0_key_error"), ev.at("tolerance")) << m;
    // RoPE rotates keys only; gpt2's learned position embedding moves the values as well.
    if (std::string(m) == "llama")
      EXPECT_LE(ev.at("layer0_value_error"), ev.at("tolerance")) << m;
    else
      EXPECT_GT(ev.at("layer0_value_error"), ev.at("tolerance")) << m;
    EXPECT_GE(f.confidence, 0.99) << m;
    // Without a model: the recorded positions alone.
    const AuditReport pair = Auditor::auditTraces(run(m, 0, {}, true), t).report;
    const Finding& g = test::onlyFinding(pair, finding::ChunkPosition);
    EXPECT_EQ(g.step, 2) << m;
    EXPECT_EQ(g.evidence.count("records_vs_chunk_positions"), 0u) << m;
  }
}

TEST(ChunkedPrefill, RightIdsWithOneLayerAtChunkLocalPositionsOnLlama) {
  const Trace t = run("llama", 4, {"chunk_position:chunk=1,layer=2"});
  EXPECT_EQ(t.steps[1].positions.front(), 4);  // the recorded ids stay right
  const AuditReport rep = audit("llama", t);
  const Finding& f = test::onlyFinding(rep, finding::ChunkPosition);
  EXPECT_EQ(f.step, 1);
  EXPECT_EQ(f.layer, 2);
  EXPECT_EQ(f.evidence.at("hypothesis"), 1);  // layer 2 alone
  EXPECT_LE(f.evidence.at("records_vs_chunk_positions"), f.evidence.at("tolerance"));
  EXPECT_LE(f.evidence.at("layer_value_error"), f.evidence.at("tolerance"));
  // gpt2 takes positions once, at its input: no per-layer fault there.
  EXPECT_THROW(run("gpt2", 4, {"chunk_position:layer=1"}), UsageError);
  EXPECT_THROW(FaultSpec::parse("chunk_position:chunk=1,offset=2"), UsageError);
  EXPECT_THROW(run("llama", 4, {"chunk_position:chunk=0"}), UsageError);
}

TEST(ChunkedPrefill, PositionOffsetsOutsideABoundaryStayPosition) {
  for (const char* m : {"gpt2", "llama"}) {
    for (const int64_t step : {0, 5}) {
      const Trace t = run(m, 4, {"wrong_position:offset=3,step=" + std::to_string(step)});
      const AuditReport rep = audit(m, t);
      EXPECT_EQ(test::onlyFinding(rep, finding::Position).step, step) << m;
    }
    // Not chunked: the boundary rule does not apply.
    const AuditReport plain = audit(m, run(m, 0, {"wrong_position:restart=1,step=1"}));
    EXPECT_EQ(test::onlyFinding(plain, finding::Position).step, 1) << m;
  }
}

TEST(ChunkedPrefill, TimelineMarksChunkEdgesAndTheWrongBoundary) {
  AuditJobSpec spec;
  spec.modelDir = test::hfModel("llama");
  spec.promptIds = {test::goldenJson("llama")["prompts"][0]["ids"].get<std::vector<int64_t>>()};
  spec.maxNewTokens = 4;
  spec.faults = {"chunk_position:chunk=2,size=4"};
  const RequestTimeline tl =
      Inspector(std::make_shared<const AuditJobOutput>(runAuditJob(spec))).timeline(0);
  std::vector<const TimelineMarker*> edges, wrong;
  for (const auto& m : tl.markers) {
    if (m.kind == "chunk") edges.push_back(&m);
    if (m.kind == "chunk_position") wrong.push_back(&m);
  }
  ASSERT_EQ(edges.size(), 3u);  // chunks 1, 2, 3 of 16 prompt tokens
  EXPECT_EQ(edges[1]->step, 2);
  EXPECT_EQ(edges[1]->label, "prefill chunk 2 from position 8");
  EXPECT_FALSE(edges[1]->alarm);
  ASSERT_EQ(wrong.size(), 1u);
  EXPECT_EQ(wrong.front()->step, 2);
  EXPECT_TRUE(wrong.front()->alarm);
  EXPECT_EQ(wrong.front()->label, "chunk 2 positions from 0");
  // Prompt tokens fed by later chunks are still prompt tokens.
  EXPECT_TRUE(tl.steps[2].fed.front().prompt);
}

}  // namespace
