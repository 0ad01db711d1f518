// Qwen3.5's config keys as transformers reads them (Qwen3_5TextConfig's defaults: every fourth
// layer full attention, the others Gated DeltaNets; transformers' legacy layer-type names) and
// what it refuses, naming the field; the gated delta rule's two forms against each other; the
// recurrent layers in the cached engine (state carried across chunked prefill, left padding kept
// out of it, what cannot apply refused) and in the trace's layer_kinds; on the fixture written by
// real transformers 5.17. The numerics against transformers are FamilyGoldenTest's
// (tests/fixtures/families/models/qwen3_5_text).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "AuditExpectations.hpp"
#include "ConfigRefusal.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/ModelConfig.hpp"
#include "model/GatedDeltaRule.hpp"

using namespace kvscope;

namespace {

std::string qwen3_5() { return test::fixture("families/models/qwen3_5_text"); }

nlohmann::json minimalQwen3_5() {
  return {{"model_type", "qwen3_5_text"}, {"vocab_size", 100}, {"hidden_size", 64},
          {"num_attention_heads", 4}, {"num_hidden_layers", 8}, {"intermediate_size", 32},
          {"max_position_embeddings", 4096}};
}

TEST(Qwen3_5Family, AbsentKeysTakeQwen3_5TextConfigsDefaults) {
  const ModelConfig c = ModelConfig::fromJson(minimalQwen3_5(), "config.json");
  EXPECT_EQ(c.architecture, Architecture::Qwen3_5);
  EXPECT_EQ(c.headDim, 256);
  EXPECT_EQ(c.numKvHeads, 4);
  EXPECT_DOUBLE_EQ(c.rope.partialRotaryFactor, 0.25);
  EXPECT_EQ(c.recipe.norm, BlockRecipe::Norm::RmsNormPlusOne);
  EXPECT_TRUE(c.qkNorm);
  EXPECT_TRUE(c.attentionOutputGate);
  EXPECT_EQ(c.deltaNet.keyHeads, 16);
  EXPECT_EQ(c.deltaNet.valueHeads, 32);
  EXPECT_EQ(c.deltaNet.keyHeadDim, 128);
  EXPECT_EQ(c.deltaNet.valueHeadDim, 128);
  EXPECT_EQ(c.deltaNet.convKernel, 4);
  EXPECT_EQ(c.deltaNet.convDim(), 2 * 16 * 128 + 32 * 128);
  // full_attention_interval 4: layers 3 and 7 attend, the others are Gated DeltaNets.
  EXPECT_EQ(c.deltaNet.layers, (std::vector<bool>{true, true, true, false, true, true, true, false}));
  EXPECT_TRUE(c.hasRecurrentLayers());
  EXPECT_NE(c.layerDescription(0).find("Gated DeltaNet"), std::string::npos) << c.layerDescription(0);
  EXPECT_EQ(c.layerDescription(3).find("Gated DeltaNet"), std::string::npos) << c.layerDescription(3);
}

// A released checkpoint's shape: the text model under text_config (model_type qwen3_5),
// rope_parameters with mrope's keys beside partial_rotary_factor, legacy layer-type names.
TEST(Qwen3_5Family, AReleasedConfigsShapeAndWhatIsRefused) {
  auto text = minimalQwen3_5();
  text["num_hidden_layers"] = 4;
  text["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25},
                             {"mrope_section", {11, 11, 10}}, {"mrope_interleaved", true}};
  text["layer_types"] = {"linear_attention", "conv", "mamba", "attention"};  // remap_legacy_layer_types
  const nlohmann::json wrapper = {{"model_type", "qwen3_5"}, {"text_config", text}, {"tie_word_embeddings", false}};
  const ModelConfig c = ModelConfig::fromJson(wrapper, "config.json");
  EXPECT_EQ(c.wrapperModelType, "qwen3_5");
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000000.0);
  EXPECT_EQ(c.deltaNet.layers, (std::vector<bool>{true, true, true, false}));

  auto doc = text;
  doc["layer_types"] = {"linear_attention", "sliding_attention", "linear_attention", "full_attention"};
  EXPECT_NE(test::configRefusal(doc).find("layer_types[1]"), std::string::npos) << test::configRefusal(doc);
  doc["layer_types"] = {"linear_attention", "full_attention"};
  EXPECT_NE(test::configRefusal(doc).find("one entry per layer (4)"), std::string::npos) << test::configRefusal(doc);
  doc = text;
  doc["linear_num_key_heads"] = 3;
  doc["linear_num_value_heads"] = 8;
  EXPECT_NE(test::configRefusal(doc).find("linear_num_value_heads"), std::string::npos) << test::configRefusal(doc);
  doc = text;
  doc["linear_conv_kernel_dim"] = 0;
  EXPECT_NE(test::configRefusal(doc).find("linear_conv_kernel_dim"), std::string::npos) << test::configRefusal(doc);
}

// transformers runs a prefill with the chunked form and a decode step with the recurrent one:
// over 150 tokens (three chunks of 64, the last one padded), from a held state, both agree.
TEST(GatedDeltaRule, TheChunkedAndTheRecurrentFormsAgree) {
  torch::manual_seed(7);
  const int64_t B = 2, s = 150, H = 3, Dk = 8, Dv = 5;
  const auto q = torch::randn({B, s, H, Dk}), k = torch::randn({B, s, H, Dk}), v = torch::randn({B, s, H, Dv});
  const auto g = -torch::rand({B, s, H}) * 0.5, beta = torch::rand({B, s, H});
  const auto initial = torch::randn({B, H, Dk, Dv}) * 0.1;
  const auto chunked = kvscope::detail::chunkedGatedDeltaRule(q, k, v, g, beta, initial);
  const auto recurrent = kvscope::detail::recurrentGatedDeltaRule(q, k, v, g, beta, initial);
  EXPECT_LT((chunked.out - recurrent.out).abs().max().item<float>(), 1e-4f);
  EXPECT_LT((chunked.state - recurrent.state).abs().max().item<float>(), 1e-4f);
  // The state carries the sequence: a run split in two from the first half's state is the
  // whole run.
  const auto first = kvscope::detail::chunkedGatedDeltaRule(q.narrow(1, 0, 70), k.narrow(1, 0, 70), v.narrow(1, 0, 70),
                                                   g.narrow(1, 0, 70), beta.narrow(1, 0, 70), initial);
  const auto second = kvscope::detail::chunkedGatedDeltaRule(q.narrow(1, 70, 80), k.narrow(1, 70, 80), v.narrow(1, 70, 80),
                                                    g.narrow(1, 70, 80), beta.narrow(1, 70, 80), first.state);
  EXPECT_LT((second.state - chunked.state).abs().max().item<float>(), 1e-4f);
  EXPECT_LT((second.out - chunked.out.narrow(1, 70, 80)).abs().max().item<float>(), 1e-4f);
  // And the state matters: from zeros, the outputs differ.
  const auto fresh = kvscope::detail::chunkedGatedDeltaRule(q, k, v, g, beta, torch::Tensor());
  EXPECT_GT((fresh.out - chunked.out).abs().max().item<float>(), 1e-3f);
}

TEST(Qwen3_5Family, TheTraceNamesTheRecurrentLayersAndACleanRunAuditsClean) {
  const Trace t = test::writtenAndRead(test::runWithFaults(qwen3_5(), {}), "qwen3_5", "clean.kvtrace");
  ASSERT_EQ(t.layerKinds.size(), 4u);
  EXPECT_TRUE(t.layerKinds[0].recurrent);
  EXPECT_FALSE(t.layerKinds[1].recurrent);
  EXPECT_TRUE(t.layerKinds[2].recurrent);
  EXPECT_EQ(t.recurrentLayers(), (std::vector<int64_t>{0, 2}));
  EXPECT_FALSE(t.holdsRows(0));
  EXPECT_TRUE(t.holdsRows(1));
  ASSERT_FALSE(t.steps.empty());
  EXPECT_TRUE(t.steps[0].layers[0].keys.empty());
  EXPECT_EQ(t.steps[0].layers[1].keys.shape, (std::vector<int64_t>{2, 10, 16}));
  auto model = Model::load(qwen3_5());
  const AuditReport rep = Auditor::audit(*model, t).report;
  EXPECT_TRUE(rep.findings.empty()) << rep.toText();
  // Without the states (another recorder, or --state-every 0) stage 2 says what it could not check.
  Trace stateless = t;
  for (auto& st : stateless.steps)
    for (auto& rec : st.layers) rec.convState = rec.recurrentState = FloatTensor{};
  const AuditReport blind = Auditor::audit(*model, stateless).report;
  EXPECT_TRUE(blind.findings.empty()) << blind.toText();
  EXPECT_NE(test::allStageChecks(blind).find("not checked: layers 0 and 2 keep a recurrent state"), std::string::npos)
      << test::allStageChecks(blind);
}

// A prompt fed in chunks carries each recurrent layer's state from chunk to chunk, and a
// left-padded batch keeps its pads out of the state: both generate what the request does
// alone, and audit clean.
TEST(Qwen3_5Family, ChunkedPrefillAndLeftPaddedBatchesCarryTheStateRight) {
  auto model = Model::load(qwen3_5());
  RequestSpec a, b;
  a.promptIds = {5, 17, 300, 41, 99, 7, 12, 250, 3, 64, 8, 19, 44};
  b.promptIds = {9, 33, 21};
  for (RequestSpec* r : {&a, &b}) {
    r->maxNewTokens = 6;
    r->stopAtEos = false;
  }
  const Trace aloneA = Engine(model).run({a}, {});
  const Trace aloneB = Engine(model).run({b}, {});
  EngineOptions chunked;
  chunked.prefillChunk = 5;
  const Trace inChunks = Engine(model).run({a}, chunked);
  EXPECT_EQ(inChunks.requests[0].generated, aloneA.requests[0].generated);
  EXPECT_TRUE(Auditor::audit(*model, inChunks).report.findings.empty());
  RequestSpec a2 = a, b2 = b;
  a2.batchGroup = b2.batchGroup = 0;
  const Trace batch = Engine(model).run({a2, b2}, {});
  EXPECT_EQ(batch.requests[0].generated, aloneA.requests[0].generated);
  EXPECT_EQ(batch.requests[1].generated, aloneB.requests[0].generated);
  const AuditReport rep = Auditor::audit(*model, batch).report;
  EXPECT_TRUE(rep.findings.empty()) << rep.toText();
}

// A fault on a layer's K/V entries cannot name a recurrent layer (speculative decoding and
// prefix caching keep states: RecurrentRollbackTest).
TEST(Qwen3_5Family, WhatCannotApplyToARecurrentLayerIsRefusedSayingWhy) {
  auto model = Model::load(qwen3_5());
  RequestSpec s;
  s.promptIds = {5, 17, 300, 41};
  s.maxNewTokens = 4;
  auto refusal = [&](const EngineOptions& o) {
    try {
      Engine(model).run({s}, o);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EngineOptions fault;
  fault.faults.push_back(FaultSpec::parse("wrong_layer:layer=1,source=0"));
  EXPECT_NE(refusal(fault).find("source=0 is a recurrent (Gated DeltaNet) layer"), std::string::npos)
      << refusal(fault);
  EngineOptions onAttention;
  onAttention.faults.push_back(FaultSpec::parse("wrong_layer:layer=3,source=1"));
  const Trace t = Engine(model).run({s}, onAttention);
  EXPECT_FALSE(Auditor::audit(*model, t).report.findings.empty());
}

}  // namespace

namespace {

// Two prompts of different lengths in one left-padded batch: request 1 runs padded by 10.
std::vector<RequestSpec> paddedBatch() {
  RequestSpec a, b;
  a.promptIds = {5, 17, 300, 41, 99, 7, 12, 250, 3, 64, 8, 19, 44};
  b.promptIds = {9, 33, 21};
  for (RequestSpec* r : {&a, &b}) {
    r->maxNewTokens = 4;
    r->stopAtEos = false;
    r->batchGroup = 0;
  }
  return {a, b};
}

TEST(Qwen3_5Family, RecordedStatesRoundTripAndEqualTheReferencesAfterEveryStep) {
  const Trace t = test::writtenAndRead(test::runWithFaults(qwen3_5(), {}), "qwen3_5", "states.kvtrace");
  ASSERT_EQ(t.steps.size(), 8u);
  for (const auto& st : t.steps) {
    EXPECT_EQ(st.layers[0].convState.shape, (std::vector<int64_t>{64, 4}));
    EXPECT_EQ(st.layers[2].recurrentState.shape, (std::vector<int64_t>{4, 8, 8}));
    EXPECT_TRUE(st.layers[1].recurrentState.empty());  // an attention layer keeps none
  }
  // The conv's state after the prefill: its last 4 inputs, so after a 10-token prompt no zeros
  // of the start; after the decode steps it holds the last 4 tokens' inputs.
  EXPECT_GT(t.steps[0].layers[0].convState.maxAbs(), 0.0f);
  auto model = Model::load(qwen3_5());
  const AuditReport rep = Auditor::audit(*model, t).report;
  EXPECT_TRUE(rep.findings.empty()) << rep.toText();
  EXPECT_NE(test::allStageChecks(rep).find("ok: the recurrent states of layers 0 and 2 equal the reference's after the same "
                                "tokens at 8 steps (16 states"),
            std::string::npos)
      << test::allStageChecks(rep);
  // Every other step: 4 of the 8.
  EngineOptions o;
  o.recordStatesEvery = 2;
  RequestSpec s;
  s.promptIds = {5, 17, 300, 41, 99, 7, 12, 250, 3, 64};
  s.maxNewTokens = 8;
  s.stopAtEos = false;
  const Trace thin = Engine(model).run({s}, o);
  int64_t with = 0;
  for (const auto& st : thin.steps) with += st.layers[0].recurrentState.empty() ? 0 : 1;
  EXPECT_EQ(with, 4);
  EXPECT_TRUE(Auditor::audit(*model, thin).report.findings.empty());
}

TEST(RecurrentState, PadsThatEnterTheRecurrenceAreFoundAtThePaddedRequestsPrefill) {
  auto model = Model::load(qwen3_5());
  EngineOptions o;
  o.faults.push_back(FaultSpec::parse("recurrent_state:request=1"));
  const Trace t = Engine(model).run(paddedBatch(), o);
  ASSERT_EQ(t.faultFirings.size(), 1u);
  EXPECT_TRUE(t.faultFirings[0].fired);
  const AuditReport rep = Auditor::audit(*model, t).report;
  const Finding& f = test::onlyFinding(rep, finding::RecurrentState);
  EXPECT_EQ(f.request, 1);
  EXPECT_EQ(f.step, 0);
  EXPECT_EQ(f.layer, 0);
  EXPECT_EQ(f.evidence.at("left_pads"), 10.0);
  EXPECT_GT(f.evidence.at("state_error"), f.evidence.at("state_tolerance"));
  EXPECT_NE(f.explanation.find("left-padded by 10"), std::string::npos) << f.explanation;
  EXPECT_NE(test::allStageChecks(rep).find("FAIL: the recurrent state of layers 0 and 2 differs"), std::string::npos)
      << test::allStageChecks(rep);
  // Without recorded states the first wrong records (layer 1) sit above recurrent layer 0: the
  // nearest answer, with its lower confidence.
  o.recordStatesEvery = 0;
  const Trace blind = Engine(model).run(paddedBatch(), o);
  const AuditReport blindReport = Auditor::audit(*model, blind).report;
  const Finding& g = test::onlyFinding(blindReport, finding::RecurrentState);
  EXPECT_EQ(g.request, 1);
  EXPECT_EQ(g.layer, 0);
  EXPECT_LT(g.confidence, 0.75);
  EXPECT_NE(g.explanation.find("record no state at this step"), std::string::npos) << g.explanation;
}

TEST(RecurrentState, RowIsKvScopesAdditionAndWhatCannotApplyIsRefused) {
  test::expectAdditionAfter(finding::RecurrentState, finding::TemperaturePosition);
  auto refusal = [](const std::string& dir, const std::string& fault) {
    try {
      test::runWithFaults(dir, {fault});
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refusal(test::fixture("families/models/qwen3"), "recurrent_state").find("needs a checkpoint with recurrent"),
            std::string::npos);
  EXPECT_NE(refusal(qwen3_5(), "recurrent_state:layer=1").find("layer 1 is an attention layer"), std::string::npos);
  // A request that runs alone has no pads: the fault never fires, and says why.
  const Trace alone = test::runWithFaults(qwen3_5(), {"recurrent_state"});
  ASSERT_EQ(alone.faultFirings.size(), 1u);
  EXPECT_FALSE(alone.faultFirings[0].fired);
  EXPECT_NE(alone.faultFirings[0].reason.find("left-padded"), std::string::npos) << alone.faultFirings[0].reason;
}

}  // namespace

namespace {

// A trace that does not say which layers keep a state (an older recorder), or says it of the
// wrong layers, is not audited as if its recurrent layers had lost their K/V: stage 1 fails,
// naming the layers.
TEST(Qwen3_5Family, ATraceThatDoesNotDeclareTheRecurrentLayersFailsStageOne) {
  auto model = Model::load(qwen3_5());
  Trace t = test::runWithFaults(qwen3_5(), {});
  t.layerKinds.clear();
  const AuditReport undeclared = Auditor::audit(*model, t).report;
  const Finding& f = test::onlyFinding(undeclared, "reference");
  EXPECT_NE(f.explanation.find("layers 0 and 2 keep a recurrent state"), std::string::npos) << f.explanation;
  Trace swapped = test::runWithFaults(qwen3_5(), {});
  std::swap(swapped.layerKinds[0], swapped.layerKinds[1]);
  const AuditReport wrong = Auditor::audit(*model, swapped).report;
  EXPECT_NE(test::onlyFinding(wrong, "reference").explanation.find("layer_kinds[0] says attention"), std::string::npos);
}

}  // namespace

#include "model/HfConfigFiles.hpp"
#include "model/families/ModelFamily.hpp"

namespace {

// make-demo --preset qwen3.5-9b: Qwen3.5-9B's text model as its config.json states it (three
// DeltaNets per full layer, 16 key / 32 value heads of 128): 8.95 billion parameters without the
// vision tower.
TEST(Qwen3_5Family, TheNineBillionPresetHasTheReleasedShape) {
  const CheckpointSpec s = CheckpointSpec::preset("qwen3.5-9b");
  familyOf(s.architecture).validateDemoSpec(s);
  const ModelConfig c = ModelConfig::fromJson(hf::configJson(s), "config.json");
  EXPECT_EQ(c.architecture, Architecture::Qwen3_5);
  EXPECT_EQ(c.deltaNet.keyHeads, 16);
  EXPECT_EQ(c.deltaNet.valueHeads, 32);
  EXPECT_EQ(c.deltaNet.keyHeadDim, 128);
  EXPECT_EQ(c.headDim, 256);
  int64_t recurrent = 0;
  for (int64_t l = 0; l < c.numLayers; ++l) recurrent += c.isRecurrentLayer(l) ? 1 : 0;
  EXPECT_EQ(recurrent, 24);
  EXPECT_FALSE(c.isRecurrentLayer(3));
  int64_t params = 0;
  for (const auto& t : familyOf(s.architecture).demoTensors(s)) params += t.numel();
  EXPECT_GT(params, 8'900'000'000);
  EXPECT_LT(params, 9'000'000'000);
}

}  // namespace
