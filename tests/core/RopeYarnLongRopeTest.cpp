// YaRN and LongRoPE as transformers 5.17's modeling_rope_utils computes them: the inverse
// frequencies of GPT-OSS's YaRN (head_dim 64, theta 150000, factor 32 over 4096 positions,
// beta 32/1, no truncation) equal, bit for bit, the float32 values transformers computes
// (printed from _compute_yarn_parameters), with attention factor 0.1 ln 32 + 1; mscale /
// mscale_all_dim give their ratio; longrope turns with its short factors up to the original
// context and its long ones beyond it, per forward; and what a config gets wrong is refused
// naming the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "audit/Tolerance.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/ModelConfig.hpp"
#include "model/RotaryEmbedding.hpp"

using namespace kvscope;
using kvscope::detail::RotaryEmbedding;

namespace {

RopeConfig gptOssYarn() {
  RopeConfig r;
  r.type = "yarn";
  r.theta = 150000.0;
  r.factor = 32.0;
  r.originalMaxPositions = 4096;
  r.truncate = false;
  return r;
}

TEST(RopeYarn, GptOssInverseFrequenciesEqualTransformersBitForBit) {
  // transformers 5.17, _compute_yarn_parameters on GPT-OSS's rope_parameters (float32, hex).
  const std::vector<float> want = {
      0x1p+0f, 0x1.60ca6ap-1f, 0x1.e62d44p-2f, 0x1.4eff54p-2f, 0x1.cda7f4p-3f, 0x1.3e19fap-3f,
      0x1.b65f3ep-4f, 0x1.2e0ec8p-4f, 0x1.a04328p-5f, 0x1.03bbaap-5f, 0x1.3cc8dep-6f, 0x1.7bd928p-7f,
      0x1.bd508p-8f, 0x1.f9fc28p-9f, 0x1.127006p-9f, 0x1.13eefp-10f, 0x1.dea878p-12f, 0x1.0f3372p-13f,
      0x1.415b8cp-15f, 0x1.badbf8p-16f, 0x1.31265p-16f, 0x1.a485f4p-17f, 0x1.21c258p-17f, 0x1.8f5056p-18f,
      0x1.132518p-18f, 0x1.7b2c8ep-19f, 0x1.05448ap-19f, 0x1.680cdp-20f, 0x1.f02e5p-21f, 0x1.55e4p-21f,
      0x1.d727d6p-22f, 0x1.44a5a6p-22f};
  const auto got = RotaryEmbedding::yarnInvFreq(gptOssYarn(), 64).contiguous();
  ASSERT_EQ(got.numel(), 32);
  for (int64_t i = 0; i < 32; ++i)
    EXPECT_EQ(got[i].item<float>(), want[static_cast<size_t>(i)]) << "pair " << i;
  EXPECT_DOUBLE_EQ(RotaryEmbedding::attentionFactorOf(gptOssYarn()), 0.1 * std::log(32.0) + 1.0);
  // cos and sin carry it: at position 0, cos = factor.
  const RotaryEmbedding rope(gptOssYarn(), 64, 131072);
  auto [cos, sin] = rope.cosSin(torch::zeros({1, 1}, torch::kLong));
  EXPECT_FLOAT_EQ(cos[0][0][0].item<float>(), static_cast<float>(0.1 * std::log(32.0) + 1.0));
  auto [cos1, sin1] = rope.cosSin(torch::zeros({1, 1}, torch::kLong), false);
  EXPECT_FLOAT_EQ(cos1[0][0][0].item<float>(), 1.0f);
}

TEST(RopeYarn, MscaleRatioAndAnExplicitFactor) {
  RopeConfig r = gptOssYarn();
  r.mscale = 1.0;
  r.mscaleAllDim = 1.0;  // Ministral 3: the ratio is 1
  EXPECT_DOUBLE_EQ(RotaryEmbedding::attentionFactorOf(r), 1.0);
  r.mscale = 0.707;
  r.mscaleAllDim = 0.0;  // only one of them: ignored, the default applies
  EXPECT_DOUBLE_EQ(RotaryEmbedding::attentionFactorOf(r), 0.1 * std::log(32.0) + 1.0);
  r.attentionFactor = 1.25;
  EXPECT_DOUBLE_EQ(RotaryEmbedding::attentionFactorOf(r), 1.25);
}

nlohmann::json phi3LongRope() {
  return {{"model_type", "phi3"}, {"vocab_size", 100}, {"hidden_size", 48},
          {"num_attention_heads", 4}, {"num_hidden_layers", 2}, {"intermediate_size", 64},
          {"max_position_embeddings", 128}, {"original_max_position_embeddings", 32},
          {"rope_parameters",
           {{"rope_type", "longrope"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5},
            {"short_factor", {1.0, 2.0, 4.0}}, {"long_factor", {3.0, 5.0, 7.0}}}}};
}

TEST(RopeLongRope, ShortFactorsUpToTheOriginalContextLongBeyondIt) {
  const ModelConfig c = ModelConfig::fromJson(phi3LongRope(), "config.json");
  ASSERT_EQ(c.rope.type, "longrope");
  EXPECT_EQ(c.rope.originalMaxPositions, 32);  // Phi-3's top-level key
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);        // derived: 128 / 32
  const RotaryEmbedding rope(c);
  EXPECT_DOUBLE_EQ(rope.attentionFactor(), std::sqrt(1 + std::log(4.0) / std::log(32.0)));
  EXPECT_FALSE(rope.usesLongFactors(32));
  EXPECT_TRUE(rope.usesLongFactors(33));
  // Position 1's angle of pair 0 is 1 / short_factor[0] up to 32 positions, 1 / long_factor[0]
  // beyond (one forward decides by its longest position).
  auto angle0 = [&](int64_t last) {
    auto pos = torch::tensor({int64_t{1}, last}, torch::kLong).view({1, 2});
    auto [cos, sin] = rope.cosSin(pos);
    return std::atan2(sin[0][0][0].item<double>(), cos[0][0][0].item<double>());
  };
  EXPECT_NEAR(angle0(31), 1.0 / 1.0, 1e-6);
  EXPECT_NEAR(angle0(32), 1.0 / 3.0, 1e-6);
}

TEST(RopeLongRope, RefusesFactorListsThatDoNotFitTheRotaryPairs) {
  auto doc = phi3LongRope();
  doc["rope_parameters"]["long_factor"] = {1.0, 2.0};
  try {
    ModelConfig::fromJson(doc, "dir/config.json");
    FAIL() << "2 long factors for 3 rotary pairs";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("long_factor"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("dir/config.json"), std::string::npos) << e.what();
  }
  doc = phi3LongRope();
  doc["rope_parameters"].erase("short_factor");
  try {
    ModelConfig::fromJson(doc, "dir/config.json");
    FAIL() << "longrope without short_factor";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("short_factor"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

// The phi3_longrope fixture (written by real transformers 5.17): original context 12.
std::string phi3LongRopeDir() { return std::string(KVSCOPE_FIXTURES_DIR) + "/families/models/phi3_longrope"; }

TEST(RopeLongRope, TheReferenceOfAPositionBeforeTheSwitchTurnsWithTheShortFactors) {
  // A full-prefix recompute of position p turns every row with the factor set of a forward of
  // p + 1 positions: short up to 12, long beyond. The reference of a 16-token stream must
  // give rows 0..11 as the 12-token prefix alone does, and rows 12.. as the whole stream does.
  auto model = Model::load(phi3LongRopeDir());
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 16; ++i) ids.push_back(5 + 37 * i % 1100);
  const ReferenceRun all = model->reference(ids, {}, {}, 10);  // a 10-token prefill, then steps
  const ReferenceRun prefix = model->reference(std::vector<int64_t>(ids.begin(), ids.begin() + 12));
  const int64_t V = all.logits.dim(1);
  // (One pass over the 16 tokens turns rows 0..11 with the long factors: 1e-1 off here.)
  float shortRows = 0, longRow = 0;
  for (int64_t r = 0; r < 12; ++r)
    for (int64_t v = 0; v < V; ++v)
      shortRows = std::max(shortRows, std::fabs(all.logits.data[static_cast<size_t>(r * V + v)] -
                                                prefix.logits.data[static_cast<size_t>(r * V + v)]));
  EXPECT_LT(shortRows, 1e-5f);
  // A 13-token stream's last row (past the switch) is the whole stream's row 12. A prefill
  // of all 16 (one forward past the switch) turns every row with the long factors.
  const ReferenceRun one = model->reference(ids);
  float oneVsSteps = 0;
  for (int64_t v = 0; v < V; ++v)
    oneVsSteps = std::max(oneVsSteps, std::fabs(one.logits.data[static_cast<size_t>(11 * V + v)] -
                                                all.logits.data[static_cast<size_t>(11 * V + v)]));
  EXPECT_GT(oneVsSteps, 1e-3f);
  const ReferenceRun thirteen = model->reference(std::vector<int64_t>(ids.begin(), ids.begin() + 13), {}, {}, 10);
  for (int64_t v = 0; v < V; ++v)
    longRow = std::max(longRow, std::fabs(all.logits.data[static_cast<size_t>(12 * V + v)] -
                                          thirteen.logits.data[static_cast<size_t>(12 * V + v)]));
  EXPECT_LT(longRow, 1e-5f);
}

TEST(RopeLongRope, TheEngineRefusesACachedRunThatCrossesTheSwitch) {
  auto model = Model::load(phi3LongRopeDir());
  RequestSpec s;
  s.promptIds = {5, 17, 300, 41, 99, 7, 12, 250, 3, 64};
  s.maxNewTokens = 8;  // positions up to 16 > 12
  try {
    Engine(model).run({s}, {});
    FAIL() << "a cached run across LongRoPE's switch";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("original_max_position_embeddings"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at most 3 tokens"), std::string::npos) << e.what();
  }
  s.maxNewTokens = 3;  // the longest forward is 12 positions: short factors throughout
  EXPECT_NO_THROW(Engine(model).run({s}, {}));
}

// The attention factor multiplies every score by its square, and the scores' rounding noise
// with them: the audit's bases carry that square (a bf16 run of transformers' Phi-3 with
// LongRoPE sat at 1.2x of the unscaled bf16 bases), and the report says so.
TEST(RopeLongRope, TheAuditToleranceCarriesTheSquareOfTheAttentionFactor) {
  auto model = Model::load(phi3LongRopeDir());
  const double a = RotaryEmbedding::attentionFactorOf(model->config().rope);
  ASSERT_GT(a, 1.2);
  RequestSpec s;
  s.promptIds = {5, 17, 300, 41, 99, 7, 12, 250, 3, 64};
  s.maxNewTokens = 3;
  const AuditReport rep = Auditor::audit(*model, Engine(model).run({s}, {})).report;
  EXPECT_TRUE(rep.clean());
  EXPECT_NEAR(rep.toleranceBase, kvscope::detail::Tolerance::recordBaseFor("float32") * a * a, 1e-12);
  EXPECT_NE(rep.toleranceRule.find("the square of the RoPE attention factor"), std::string::npos)
      << rep.toleranceRule;
  // Below 1 (no model uses one) the bases stay as calibrated.
  EXPECT_EQ(kvscope::detail::Tolerance("bfloat16", 1.0, "F32", 4, {}, true, 0.8).relative(),
            kvscope::detail::Tolerance("bfloat16").relative());
}

}  // namespace
