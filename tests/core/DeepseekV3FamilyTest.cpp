// DeepSeek V3's config keys as transformers reads them (DeepseekV3Config's defaults: a latent of
// 512 and a roped key part of 64 cached per token, a query LoRA of 1536, 256 experts in 8 groups)
// and what it refuses, naming the field; on the fixture written by real transformers 5.17 (latent
// keys [1, t, 32], roped values [1, t, 8]) a clean run, a speculative one and a prefix-cache one
// audit clean, and faults on the latent rows are found under their rows. The numerics against
// transformers are FamilyGoldenTest's (tests/fixtures/families/models/deepseek_v3).
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "AuditExpectations.hpp"
#include "ConfigRefusal.hpp"
#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/AuditJob.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/Inspection.hpp"
#include "kvscope/ModelConfig.hpp"
#include "kvscope/TraceFile.hpp"

using namespace kvscope;

namespace {

std::string deepseekDir() { return test::fixture("families/models/deepseek_v3"); }

nlohmann::json minimalDeepseek() {
  return {{"model_type", "deepseek_v3"}, {"vocab_size", 100},  {"hidden_size", 64}, {"num_attention_heads", 4},
          {"num_hidden_layers", 4},      {"intermediate_size", 96}, {"max_position_embeddings", 4096}};
}

TEST(DeepseekV3Family, AbsentKeysTakeDeepseekV3ConfigsDefaults) {
  const ModelConfig c = ModelConfig::fromJson(minimalDeepseek(), "config.json");
  EXPECT_EQ(c.architecture, Architecture::DeepseekV3);
  EXPECT_TRUE(c.mla.enabled());
  EXPECT_EQ(c.mla.kvLoraRank, 512);
  EXPECT_EQ(c.mla.qLoraRank, 1536);
  EXPECT_EQ(c.mla.ropeDim, 64);
  EXPECT_EQ(c.mla.nopeDim, 128);
  EXPECT_EQ(c.mla.valueDim, 128);
  EXPECT_EQ(c.mla.ropePairs, MlaConfig::RopePairs::Deinterleaved);
  // The cache's geometry: one latent "head" of 512 (keys) and the roped part of 64 (values).
  EXPECT_EQ(c.numKvHeads, 1);
  EXPECT_EQ(c.headDim, 512);
  EXPECT_EQ(c.cacheValueDim(), 64);
  EXPECT_EQ(c.rotaryHeadDim(), 64);
  EXPECT_NEAR(c.attentionScale, 1.0 / std::sqrt(192.0), 1e-12);
  EXPECT_EQ(c.moe.numExperts, 256);
  EXPECT_EQ(c.moe.topK, 8);
  EXPECT_EQ(c.moe.groups, 8);
  EXPECT_EQ(c.moe.topGroups, 4);
  EXPECT_DOUBLE_EQ(c.moe.routedScale, 2.5);
  EXPECT_EQ(c.moe.sharedIntermediateSize, 2048);
  EXPECT_EQ(c.moe.routing, MoeConfig::Routing::SigmoidGroupLimited);
  EXPECT_EQ(c.moe.layers, (std::vector<bool>{false, false, false, true}));  // first_k_dense_replace 3
  EXPECT_FALSE(c.keyRecordsAreRotatedHeads());
}

TEST(DeepseekV3Family, QueryWithoutLoraAndYarnsMscaleOnTheScores) {
  auto doc = minimalDeepseek();
  doc["q_lora_rank"] = nullptr;  // DeepSeek-V2-Lite's form: q_proj
  doc["rope_parameters"] = {{"rope_type", "yarn"},    {"rope_theta", 10000.0}, {"factor", 40.0},
                            {"mscale", 0.707},        {"mscale_all_dim", 0.707},
                            {"original_max_position_embeddings", 4096}};
  const ModelConfig c = ModelConfig::fromJson(doc, "config.json");
  EXPECT_EQ(c.mla.qLoraRank, 0);
  const double mscale = 0.1 * 0.707 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c.attentionScale, mscale * mscale / std::sqrt(192.0), 1e-12);
}

TEST(DeepseekV3Family, GroupsThatCannotRouteAreRefusedNamingTheField) {
  auto doc = minimalDeepseek();
  doc["n_routed_experts"] = 12;
  doc["n_group"] = 8;
  EXPECT_NE(test::configRefusal(doc).find("n_group"), std::string::npos) << test::configRefusal(doc);
  doc["n_group"] = 4;
  doc["topk_group"] = 5;
  EXPECT_NE(test::configRefusal(doc).find("topk_group"), std::string::npos) << test::configRefusal(doc);
  doc["topk_group"] = 1;
  doc["num_experts_per_tok"] = 4;  // one group of 3 experts
  EXPECT_NE(test::configRefusal(doc).find("num_experts_per_tok"), std::string::npos) << test::configRefusal(doc);
  doc["num_experts_per_tok"] = 3;
  EXPECT_EQ(test::configRefusal(doc), "");
  doc["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}};
  EXPECT_NE(test::configRefusal(doc).find("partial_rotary_factor"), std::string::npos) << test::configRefusal(doc);
}

TEST(DeepseekV3Family, TheLatentRowsAreTheRecordsAndCleanRunsAuditClean) {
  auto model = Model::load(deepseekDir());
  const Trace t = test::writtenAndRead(test::runWithFaults(deepseekDir(), {}), "deepseek_v3", "clean.kvtrace");
  EXPECT_EQ(t.model.numKvHeads, 1);
  EXPECT_EQ(t.model.headDim, 32);
  EXPECT_EQ(t.model.valueDim(), 8);
  ASSERT_EQ(t.layerKinds.size(), 3u);
  for (const auto& k : t.layerKinds) EXPECT_TRUE(k.latent);
  ASSERT_FALSE(t.steps.empty());
  EXPECT_EQ(t.steps[0].layers[0].keys.shape, (std::vector<int64_t>{1, 10, 32}));
  EXPECT_EQ(t.steps[0].layers[0].values.shape, (std::vector<int64_t>{1, 10, 8}));
  EXPECT_FALSE(t.steps[0].experts.empty());
  const AuditReport rep = Auditor::audit(*model, t).report;
  EXPECT_TRUE(rep.findings.empty()) << rep.toText();
  EXPECT_NE(test::allStageChecks(rep).find("d=32 (values: d=8)"), std::string::npos) << test::allStageChecks(rep);

  RequestSpec s;
  s.promptIds = {5, 17, 300, 41, 5, 17, 300, 41, 5, 17};
  s.maxNewTokens = 10;
  s.stopAtEos = false;
  EngineOptions spec;
  spec.speculativeDrafts = 2;
  const Trace drafted = Engine(model).run({s}, spec);
  EXPECT_EQ(drafted.requests[0].generated, Engine(model).run({s}, {}).requests[0].generated);
  EXPECT_TRUE(Auditor::audit(*model, drafted).report.findings.empty());

  RequestSpec second = s;
  second.arrivalTick = 1;
  EngineOptions prefix;
  prefix.prefixCacheBlock = 4;
  const Trace shared = Engine(model).run({s, second}, prefix);
  bool reused = false;
  for (const auto& st : shared.steps) reused = reused || st.reusedCount > 0;
  EXPECT_TRUE(reused);
  const AuditReport prefixReport = Auditor::audit(*model, shared).report;
  EXPECT_TRUE(prefixReport.findings.empty()) << prefixReport.toText();
}

// A trace whose layer_kinds disagree with the checkpoint on latent rows is of another model:
// stage 1 fails naming the entry, whichever side says latent.
TEST(DeepseekV3Family, LayerKindsThatDisagreeOnLatentRowsFailStageOne) {
  auto model = Model::load(deepseekDir());
  Trace t = test::runWithFaults(deepseekDir(), {});
  t.layerKinds[1].latent = false;
  const AuditReport rep = Auditor::audit(*model, t).report;
  ASSERT_FALSE(rep.findings.empty());
  EXPECT_EQ(rep.findings[0].id, "reference") << rep.toText();
  EXPECT_NE(test::allStageChecks(rep).find("layer_kinds[1] says per-head K/V rows"), std::string::npos)
      << test::allStageChecks(rep);
}

// The inspector names a latent layer's records for what they are (CLI and GUI read showsLatent).
TEST(DeepseekV3Family, TheInspectorShowsLatentRowsAsSuch) {
  AuditJobSpec spec;
  spec.modelDir = deepseekDir();
  spec.promptIds = {{5, 17, 300, 41, 99, 7}};
  spec.maxNewTokens = 3;
  Inspector inspector(std::make_shared<const AuditJobOutput>(runAuditJob(spec)));
  const StepView keys = inspector.view(InspectionPoint{0, 1, 1, 0, KvKind::Keys});
  EXPECT_TRUE(keys.showsLatent);
  EXPECT_EQ(keys.headDim, 32);
  EXPECT_EQ(inspector.view(InspectionPoint{0, 1, 1, 0, KvKind::Values}).headDim, 8);
}

TEST(DeepseekV3Family, FaultsOnTheLatentRowsAreFoundUnderTheirRows) {
  auto model = Model::load(deepseekDir());
  const AuditReport wrong =
      Auditor::audit(*model, test::runWithFaults(deepseekDir(), {"wrong_layer:layer=2,source=1"})).report;
  const Finding& f = test::onlyFinding(wrong, "wrong_layer");
  EXPECT_EQ(f.layer, 2);
  const AuditReport dup = Auditor::audit(*model, test::runWithFaults(deepseekDir(), {"duplicate_append"})).report;
  ASSERT_FALSE(dup.findings.empty()) << dup.toText();
  EXPECT_EQ(dup.findings[0].id, "duplicate_append") << dup.toText();
}

// yarn_attention_factor on latent attention: cos and sin left unscaled turn the roped key parts
// (the value records) by a constant off, the latent rows (the keys) exact; the row reads them so
// (the fixture's mscale 1 / mscale_all_dim 0.7 give cos and sin a factor other than 1).
TEST(DeepseekV3Family, AnAttentionFactorDroppedIsFoundOnTheRopedKeyParts) {
  auto model = Model::load(deepseekDir());
  const AuditReport rep =
      Auditor::audit(*model, test::runWithFaults(deepseekDir(), {"yarn_attention_factor"})).report;
  const Finding& f = test::onlyFinding(rep, "yarn_attention_factor");
  EXPECT_EQ(f.layer, 0);
  EXPECT_NE(f.explanation.find("roped key parts (k_pe) differ"), std::string::npos) << f.explanation;
  EXPECT_NE(f.explanation.find("latent rows are exact"), std::string::npos) << f.explanation;
}

// mla_absorb: the decode path attends in the absorbed form with kv_b_proj split by matrix halves.
// Every latent row of the layer is exact, the prefill (step 0) is clean, and the row names the
// layer whose attention went wrong at the first decode step.
TEST(DeepseekV3Family, AbsorbedWeightsInTheWrongLayoutAreFoundAtTheFirstDecodeStep) {
  auto model = Model::load(deepseekDir());
  const Trace t = test::runWithFaults(deepseekDir(), {"mla_absorb:layer=1"});
  ASSERT_FALSE(t.faultFirings.empty());
  EXPECT_TRUE(t.faultFirings[0].fired);
  EXPECT_EQ(t.faultFirings[0].step, 1);
  const AuditReport rep = Auditor::audit(*model, t).report;
  const Finding& f = test::onlyFinding(rep, "mla_absorb");
  EXPECT_EQ(f.step, 1);
  EXPECT_EQ(f.layer, 1);
  const AuditReport every = Auditor::audit(*model, test::runWithFaults(deepseekDir(), {"mla_absorb"})).report;
  const Finding& g = test::onlyFinding(every, "mla_absorb");
  EXPECT_EQ(g.step, 1);
  EXPECT_EQ(g.layer, 0);
}

TEST(DeepseekV3Family, MlaAbsorbNeedsALatentModel) {
  try {
    test::runWithFaults(test::fixture("families/models/qwen3"), {"mla_absorb"});
    FAIL() << "mla_absorb ran on a model without latent attention";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("kv_lora_rank"), std::string::npos) << e.what();
  }
}

TEST(DeepseekV3Family, AQuantizedCacheNeedsRowsOfWholeBlocks) {
  auto model = Model::load(deepseekDir());
  RequestSpec s;
  s.promptIds = {5, 17, 300};
  s.maxNewTokens = 2;
  EngineOptions o;
  o.kvCacheDtype = "q8_0";
  try {
    Engine(model).run({s}, o);
    FAIL() << "a q8_0 cache of 8-wide value rows ran";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("value_head_dim a multiple of 32 (its blocks), not 8"), std::string::npos)
        << e.what();
  }
}

}  // namespace
