// Llama 4's config keys as transformers reads them (Llama4TextConfig's defaults: every fourth
// layer NoPE and full, the others chunked; an empty no_rope_layers as absent; MoE layers by
// interleave_moe_layer_step; the dense layers' width intermediate_size_mlp) and what it refuses,
// naming the field; the chunked layers in the trace's layer_kinds; the engine's chunk_mask
// fault found by the audit at the layer and position it fires, on the fixture written by real
// transformers 5.17. The numerics against transformers are FamilyGoldenTest's
// (tests/fixtures/families/models/llama4_text).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "AuditExpectations.hpp"
#include "ConfigRefusal.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/FailureMatrix.hpp"
#include "kvscope/ModelConfig.hpp"

using namespace kvscope;

namespace {

std::string llama4() { return test::fixture("families/models/llama4_text"); }

nlohmann::json minimalLlama4() {
  return {{"model_type", "llama4_text"}, {"vocab_size", 100}, {"hidden_size", 64},
          {"num_attention_heads", 16}, {"num_hidden_layers", 8}, {"intermediate_size", 32},
          {"max_position_embeddings", 8192}};
}

TEST(Llama4Family, AbsentKeysTakeLlama4TextConfigsDefaults) {
  auto doc = minimalLlama4();
  doc["no_rope_layers"] = nlohmann::json::array();  // Scout's config: empty means the default
  const ModelConfig c = ModelConfig::fromJson(doc, "config.json");
  EXPECT_EQ(c.architecture, Architecture::Llama4);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_EQ(c.numKvHeads, 8);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_TRUE(c.recipe.ropeInterleaved);
  EXPECT_TRUE(c.qkL2Norm);
  EXPECT_EQ(c.ropeLayers, (std::vector<bool>{true, true, true, false, true, true, true, false}));
  EXPECT_EQ(c.attentionChunk, 8192);
  EXPECT_EQ(c.chunkedLayers, c.ropeLayers);  // layer_types absent: the RoPE layers are chunked
  EXPECT_DOUBLE_EQ(c.queryScaleBeta, 0.1);
  EXPECT_EQ(c.queryScaleContext, 8192);
  EXPECT_EQ(c.queryScaleOffset, 1);
  EXPECT_TRUE(c.queryScaleNopeOnly);
  EXPECT_EQ(c.moe.numExperts, 16);
  EXPECT_EQ(c.moe.topK, 1);
  EXPECT_EQ(c.moe.routing, MoeConfig::Routing::TopKThenSigmoid);
  EXPECT_EQ(c.moe.expert, MoeConfig::Expert::StackedGated);
  EXPECT_TRUE(c.moe.weightInputs);
  EXPECT_EQ(c.moe.intermediateSize, 32);        // intermediate_size: the experts'
  EXPECT_EQ(c.moe.sharedIntermediateSize, 32);  // and the shared expert's
  EXPECT_EQ(c.intermediateSize, 16384);         // intermediate_size_mlp: the dense layers'
  EXPECT_EQ(c.moe.layers, std::vector<bool>(8, true));  // interleave_moe_layer_step 1
}

TEST(Llama4Family, TheFixturesConfig) {
  const ModelConfig c = ModelConfig::load(llama4() + "/config.json");
  EXPECT_EQ(c.chunkedLayers, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(c.attentionChunk, 8);
  EXPECT_EQ(c.moe.layers, (std::vector<bool>{false, true, false}));
  EXPECT_EQ(c.intermediateSize, 96);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_NE(c.layerDescription(0).find("chunks of 8"), std::string::npos) << c.layerDescription(0);
  EXPECT_NE(c.layerDescription(1).find("NoPE"), std::string::npos) << c.layerDescription(1);
  EXPECT_NE(c.layerDescription(1).find("query temperature"), std::string::npos) << c.layerDescription(1);
  EXPECT_NE(c.layerDescription(1).find("+ shared"), std::string::npos) << c.layerDescription(1);
}

TEST(Llama4Family, MoeLayersAndLayerTypesAsGivenAndWhatIsRefused) {
  auto doc = minimalLlama4();
  doc["interleave_moe_layer_step"] = 2;
  EXPECT_EQ(ModelConfig::fromJson(doc, "config.json").moe.layers,
            (std::vector<bool>{false, true, false, true, false, true, false, true}));
  doc["moe_layers"] = {0, 5};
  EXPECT_EQ(ModelConfig::fromJson(doc, "config.json").moe.layers,
            (std::vector<bool>{true, false, false, false, false, true, false, false}));
  doc["moe_layers"] = {8};
  EXPECT_NE(test::configRefusal(doc).find("moe_layers"), std::string::npos);
  doc.erase("moe_layers");
  doc["layer_types"] = std::vector<std::string>(8, "full_attention");
  doc["layer_types"][6] = "chunked_attention";
  const ModelConfig c = ModelConfig::fromJson(doc, "config.json");
  EXPECT_TRUE(c.isChunkedLayer(6));
  EXPECT_FALSE(c.isChunkedLayer(0));
  doc["layer_types"][2] = "sliding_attention";
  std::string e = test::configRefusal(doc);
  EXPECT_NE(e.find("layer_types[2]"), std::string::npos) << e;
  doc["layer_types"][2] = "full_attention";
  doc["attention_chunk_size"] = nullptr;  // Llama Guard 4's config; transformers refuses it too
  e = test::configRefusal(doc);
  EXPECT_NE(e.find("attention_chunk_size"), std::string::npos) << e;
  EXPECT_NE(e.find("dir/config.json"), std::string::npos) << e;
  doc["layer_types"][6] = "full_attention";  // no chunked layer: no chunk needed
  EXPECT_EQ(ModelConfig::fromJson(doc, "config.json").attentionChunk, 0);
  doc["no_rope_layers"] = {1, 1, 2, 1, 1, 1, 1, 0};
  EXPECT_NE(test::configRefusal(doc).find("no_rope_layers"), std::string::npos);
}

TEST(Llama4Family, TheTraceNamesTheChunkedLayers) {
  const Trace t = test::writtenAndRead(test::runWithFaults(llama4(), {}), "llama4", "clean.kvtrace");
  ASSERT_EQ(t.layerKinds.size(), 3u);
  EXPECT_EQ(t.layerKinds[0].chunk, 8);
  EXPECT_EQ(t.layerKinds[1].chunk, 0);
  EXPECT_EQ(t.layerKinds[1].window, 0);
  EXPECT_EQ(t.layerKinds[2].chunk, 8);
}

// Stage 1 holds the trace's layer_kinds against the checkpoint's: agreeing, "ok"; a chunk the
// checkpoint does not have, a note naming the layer (the reference computes the checkpoint's).
TEST(Llama4Family, StageOneHoldsTheLayerKindsAgainstTheCheckpoint) {
  auto model = Model::load(llama4());
  Trace t = test::runWithFaults(llama4(), {});
  auto stageOne = [&](const Trace& trace) {
    const AuditResult result = Auditor::audit(*model, trace);
    std::string all;
    for (const auto& line : result.report.stages.at(0).checks) all += line + "\n";
    return all;
  };
  EXPECT_NE(stageOne(t).find("ok: the trace's layer_kinds fit the checkpoint's attention on every layer"),
            std::string::npos);
  t.layerKinds[2].chunk = 16;
  t.layerKinds[1].window = 4;
  const std::string lines = stageOne(t);
  EXPECT_NE(lines.find("note: the trace's layer_kinds[1] says sliding window 4 but the checkpoint's layer 1 has "
                       "full attention (and 1 more layer differs)"),
            std::string::npos)
      << lines;
}

TEST(Llama4Family, RowIsKvScopesAddition) {
  EXPECT_NE(FailureMatrix::row(finding::ChunkMask).observation.find("chunk"), std::string::npos);
  test::expectAdditionAfter(finding::ChunkMask, finding::ExpertRouting);
}

TEST(ChunkMask, EveryChunkedLayerIsFoundAtTheFirstPositionPastTheFirstChunk) {
  auto model = Model::load(llama4());
  const AuditReport rep = Auditor::audit(*model, test::runWithFaults(llama4(), {"chunk_mask"})).report;
  const Finding& f = test::onlyFinding(rep, finding::ChunkMask);
  EXPECT_EQ(f.step, 0);      // the 10-token prompt passes the first chunk of 8
  EXPECT_EQ(f.layer, 0);     // the first chunked layer's attention saw too much
  EXPECT_EQ(f.position, 8);  // the first query whose window reaches into the previous chunk
  EXPECT_EQ(f.evidence.at("chunk"), 8.0);
  EXPECT_EQ(f.evidence.at("windowed_layers"), 2.0);  // layers 0 and 2
  EXPECT_LE(f.evidence.at("hypothesis_error"), f.evidence.at("tolerance"));
}

TEST(ChunkMask, TheLastLayerAloneShowsInTheLogitsOnly) {
  auto model = Model::load(llama4());
  const AuditReport rep = Auditor::audit(*model, test::runWithFaults(llama4(), {"chunk_mask:layer=2"})).report;
  const Finding& f = test::onlyFinding(rep, finding::ChunkMask);
  EXPECT_EQ(f.step, 0);
  EXPECT_EQ(f.layer, 2);
  EXPECT_EQ(f.position, 9);  // the prefill's logits row is its last token's
  EXPECT_EQ(f.evidence.at("windowed_layers"), 1.0);
}

// no_rope_layers read inverted on Llama 4 flips the q/k L2 norm and the query temperature with
// the rotation: the key records alone cannot show it (position 0 differs too); the row's
// re-derivation with layer 1 run as a rotary layer reproduces the run.
TEST(NopeLayerRope, Llama4sLayerRunAsTheOtherKindIsFound) {
  auto model = Model::load(llama4());
  const AuditReport rep = Auditor::audit(*model, test::runWithFaults(llama4(), {"nope_layer_rope:layer=1"})).report;
  const Finding& f = test::onlyFinding(rep, finding::NopeLayerRope);
  EXPECT_EQ(f.step, 0);
  EXPECT_EQ(f.layer, 1);
  EXPECT_EQ(f.position, 0);  // the L2 norm changes position 0's key too
  EXPECT_EQ(f.evidence.at("flipped_layers"), 1.0);
  EXPECT_EQ(f.evidence.at("chunks_flipped"), 0.0);
  EXPECT_EQ(f.evidence.at("layer_rotates"), 0.0);
  EXPECT_LE(f.evidence.at("hypothesis_error"), f.evidence.at("tolerance"));
}

// A left-padded batch (request 0's 7 tokens beside request 1's 10): its clean run audits clean;
// with the NoPE layer's query temperature taken at the cache index (pads counted, as
// transformers' Llama 4 does) request 0 is temperature_position where the shift of 3 crosses a
// floor_scale step of 4: position 1 (floor((1 + 1) / 4) = 0, floor((1 + 3 + 1) / 4) = 1).
Trace paddedBatch(const std::vector<std::string>& faults) {
  auto m = Model::load(llama4());
  std::vector<RequestSpec> specs(2);
  specs[0].promptIds = {5, 17, 300, 41, 99, 7, 12};
  specs[1].promptIds = {5, 17, 300, 41, 99, 7, 12, 250, 3, 64};
  for (auto& s : specs) {
    s.maxNewTokens = 6;
    s.stopAtEos = false;
    s.batchGroup = 0;
  }
  EngineOptions o;
  for (const auto& f : faults) o.faults.push_back(FaultSpec::parse(f));
  return Engine(m).run(specs, o);
}

TEST(TemperaturePosition, APaddedRequestsTemperatureAtItsCacheIndexIsFound) {
  auto model = Model::load(llama4());
  const AuditReport clean = Auditor::audit(*model, paddedBatch({})).report;
  EXPECT_TRUE(clean.findings.empty()) << clean.toText();
  const AuditReport rep = Auditor::audit(*model, paddedBatch({"temperature_position"})).report;
  const Finding& f = test::onlyFinding(rep, finding::TemperaturePosition);
  EXPECT_EQ(f.request, 0);
  EXPECT_EQ(f.step, 0);
  EXPECT_EQ(f.layer, 1);  // the NoPE layer, the only one with the temperature
  EXPECT_EQ(f.position, 1);
  EXPECT_EQ(f.evidence.at("left_pads"), 3.0);
  EXPECT_LE(f.evidence.at("hypothesis_error"), f.evidence.at("tolerance"));
  test::expectAdditionAfter(finding::TemperaturePosition, finding::ChunkMask);
  // Without padding the fault has nothing to count and says so; without a temperature it is refused.
  const Trace alone = test::runWithFaults(llama4(), {"temperature_position"});
  ASSERT_EQ(alone.faultFirings.size(), 1u);
  EXPECT_FALSE(alone.faultFirings[0].fired);
  EXPECT_NE(alone.faultFirings[0].reason.find("left-padded"), std::string::npos) << alone.faultFirings[0].reason;
  try {
    test::runWithFaults(test::fixture("families/models/gpt_oss"), {"temperature_position"});
    ADD_FAILURE() << "gpt_oss has no query temperature";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("query temperature"), std::string::npos) << e.what();
  }
}

TEST(ChunkMask, ACleanRunAShortRunAndCheckpointsOrLayersWithoutChunks) {
  auto model = Model::load(llama4());
  const AuditReport clean = Auditor::audit(*model, test::runWithFaults(llama4(), {})).report;
  EXPECT_TRUE(clean.findings.empty()) << clean.toText();
  // Within the first chunk a window of the chunk's size sees the same keys: the fault never
  // fires and says why.
  RequestSpec s;
  s.promptIds = {5, 17, 300};
  s.maxNewTokens = 4;
  s.stopAtEos = false;
  EngineOptions o;
  o.faults.push_back(FaultSpec::parse("chunk_mask"));
  const Trace shortRun = Engine(model).run({s}, o);
  ASSERT_EQ(shortRun.faultFirings.size(), 1u);
  EXPECT_FALSE(shortRun.faultFirings[0].fired);
  EXPECT_NE(shortRun.faultFirings[0].reason.find("first 8 positions"), std::string::npos)
      << shortRun.faultFirings[0].reason;
  EXPECT_TRUE(Auditor::audit(*model, shortRun).report.findings.empty());
  try {
    test::runWithFaults(llama4(), {"chunk_mask:layer=1"});
    ADD_FAILURE() << "a full-attention layer has no chunk to mistake";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1"), std::string::npos) << e.what();
  }
  try {
    test::runWithFaults(test::fixture("families/models/gpt_oss"), {"chunk_mask"});
    ADD_FAILURE() << "gpt_oss has no chunked layer";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("attention_chunk_size"), std::string::npos) << e.what();
  }
}

}  // namespace
