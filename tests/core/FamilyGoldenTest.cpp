// The model families against real transformers: the checkpoints and goldens written by
// tests/fixtures/families/make_family_fixtures.py (transformers 5.17.0, float32, eager).
// Reference logits and the K/V after the prompt within 1e-4, the cached engine's 16-token
// greedy continuation equal, each step's logits within 1e-4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <fstream>
#include <nlohmann/json.hpp>

#include "ScratchCheckpoint.hpp"
#include "TestSupport.hpp"
#include "audit/Tolerance.hpp"
#include "kvscope/CheckpointWriter.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Model.hpp"
#include "model/RotaryEmbedding.hpp"

using namespace kvscope;
using kvscope::test::closeTo;

namespace {

std::string familyModel(const std::string& f) { return test::fixture("families/models/" + f); }
std::string familyGolden(const std::string& f, const std::string& ext) {
  return test::fixture("families/golden/" + f + ext);
}
nlohmann::json familyJson(const std::string& f) {
  std::ifstream in(familyGolden(f, ".json"));
  return nlohmann::json::parse(in);
}

// The last `keep` positions of a [h, T, d] cache tensor: what a cache that keeps only its
// window holds after the prompt.
FloatTensor lastPositions(const FloatTensor& t, int64_t keep) {
  const int64_t h = t.dim(0), T = t.dim(1), d = t.dim(2);
  FloatTensor out = FloatTensor::zeros({h, keep, d});
  for (int64_t a = 0; a < h; ++a)
    for (int64_t p = 0; p < keep; ++p)
      for (int64_t j = 0; j < d; ++j)
        out.data[static_cast<size_t>((a * keep + p) * d + j)] =
            t.data[static_cast<size_t>((a * T + (T - keep + p)) * d + j)];
  return out;
}

FloatTensor goldenRow(const FloatTensor& t, int64_t r) { return test::rows(t, r, 1); }

// transformers' expert choices for a prompt (golden/FAMILY.routing.safetensors, [T, L, K]) as
// the choices a trace records.
ExpertChoices routingGolden(const std::string& f, const std::string& name, int64_t layers) {
  auto file = SafetensorsFile::open(familyGolden(f, ".routing.safetensors"));
  ExpertChoices c;
  c.layers = layers;
  c.slots = file->entry(name).shape.at(2);
  c.ids = file->readInt64(name);
  return c;
}

// The experts KV Scope's reference takes per position and layer ([T][L] sorted ids).
class ExpertSink : public TensorSink {
 public:
  bool wants(const std::string& name) const override { return name == "experts"; }
  void onTensor(int64_t layer, const std::string&, const FloatTensor& v) override {
    const int64_t T = v.dim(1), K = v.dim(2);
    if (byToken.size() < static_cast<size_t>(T)) byToken.resize(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int64_t> ids;
      for (int64_t k = 0; k < K; ++k) ids.push_back(static_cast<int64_t>(v.data[static_cast<size_t>(t * K + k)]));
      std::sort(ids.begin(), ids.end());
      auto& row = byToken[static_cast<size_t>(t)];
      if (row.size() <= static_cast<size_t>(layer)) row.resize(static_cast<size_t>(layer) + 1);
      row[static_cast<size_t>(layer)] = ids;
    }
  }
  std::vector<std::vector<std::vector<int64_t>>> byToken;
};
FloatTensor stepRow(const FloatTensor& v) { return FloatTensor({1, v.numel()}, v.data); }

// 1e-4, and float32 noise of 1e-5 of the logits' largest magnitude on top (GPT-OSS's clamped
// experts and sinks put logits of magnitude 10 about 1.3e-4 from transformers').
float logitTolerance(const FloatTensor& golden) { return 1e-4f + 1e-5f * golden.maxAbs(); }

// A fixture whose float32 result is itself uncertain: transformers' own float32 run lies
// f32_*_vs_f64 from its float64 run (the JSON's per prompt; the Qwen3.5-MoE fixture's prompt 0
// logits 9.6e-4, its layer-3 prefill 3.5e-4, where KV Scope's float32 lies 3.6e-4 from that
// float64 run). Another float32 implementation cannot be held closer to transformers' than
// that, so the fixed tolerance grows to four times it; a bug moves these numbers by 0.1 and more.
float withFloatNoise(float fixed, const nlohmann::json& prompt, const char* key) {
  return std::max(fixed, 4.0f * prompt.value(key, 0.0f));
}

class FamilyGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyGolden, PromptLogitsAndPrefillKvMatchTransformers) {
  const std::string f = GetParam();
  auto model = Model::load(familyModel(f));
  auto golden = SafetensorsFile::open(familyGolden(f, ".safetensors"));
  const auto meta = familyJson(f);
  ASSERT_FALSE(meta["prompts"].empty());
  for (size_t i = 0; i < meta["prompts"].size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const auto& pm = meta["prompts"][i];
    const std::string p = "p" + std::to_string(i) + ".";
    ReferenceRun run = model->reference(pm["ids"].get<std::vector<int64_t>>());
    const FloatTensor wantLogits = golden->readFloat(p + "prompt_logits");
    EXPECT_TRUE(closeTo(run.logits, wantLogits, withFloatNoise(logitTolerance(wantLogits), pm, "f32_logits_vs_f64")));
    const float kvTol = withFloatNoise(1e-4f, pm, "f32_prefill_vs_f64");
    ASSERT_EQ(run.keys.size(), static_cast<size_t>(model->config().numLayers));
    for (int64_t l = 0; l < model->config().numLayers; ++l) {
      const std::string layer = p + "prefill.layer" + std::to_string(l);
      if (model->config().isRecurrentLayer(l)) {  // the conv's last inputs and the recurrent state
        EXPECT_TRUE(run.keys[static_cast<size_t>(l)].empty()) << layer;
        EXPECT_TRUE(closeTo(run.convStates[static_cast<size_t>(l)], golden->readFloat(layer + ".conv"), kvTol)) << layer;
        EXPECT_TRUE(closeTo(run.recurrentStates[static_cast<size_t>(l)], golden->readFloat(layer + ".state"), kvTol))
            << layer;
        continue;
      }
      const FloatTensor wantK = golden->readFloat(layer + ".k"), wantV = golden->readFloat(layer + ".v");
      // A sliding layer's cache keeps only the last positions of its window.
      const int64_t keep = wantK.dim(1);
      ASSERT_LE(keep, run.keys[static_cast<size_t>(l)].dim(1)) << layer;
      EXPECT_TRUE(closeTo(lastPositions(run.keys[static_cast<size_t>(l)], keep), wantK, kvTol)) << layer;
      EXPECT_TRUE(closeTo(lastPositions(run.values[static_cast<size_t>(l)], keep), wantV, kvTol)) << layer;
    }
  }
}

TEST_P(FamilyGolden, CachedGreedyContinuationMatchesTransformers) {
  const std::string f = GetParam();
  auto model = Model::load(familyModel(f));
  auto golden = SafetensorsFile::open(familyGolden(f, ".safetensors"));
  const auto meta = familyJson(f);
  std::vector<RequestSpec> specs;
  for (const auto& pm : meta["prompts"]) {
    RequestSpec s;
    s.promptIds = pm["ids"].get<std::vector<int64_t>>();
    s.maxNewTokens = 16;
    s.stopAtEos = false;  // the fixture decodes 16 tokens regardless of EOS
    specs.push_back(s);
  }
  Trace trace = Engine(model).run(specs, {});
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    EXPECT_EQ(trace.requests[i].generated, meta["prompts"][i]["greedy_manual"].get<std::vector<int64_t>>());
    const auto want = golden->readFloat("p" + std::to_string(i) + ".greedy.step_logits");
    const auto steps = trace.stepsOf(static_cast<int64_t>(i));
    ASSERT_EQ(steps.size(), 16u);
    for (size_t s = 0; s < steps.size(); ++s)
      EXPECT_TRUE(closeTo(stepRow(steps[s]->logits), goldenRow(want, static_cast<int64_t>(s)),
                          withFloatNoise(logitTolerance(want), meta["prompts"][i], "f32_greedy_vs_f64")))
          << "step " << s;
  }
}

// The same checkpoint run by transformers in bfloat16 (weights and compute): the float32
// reference must hold its logits and prefill K/V inside the tolerances the audit gives a
// bf16 trace (compute_dtype bfloat16, K/V stored in BF16), as a clean bf16 run audits clean;
// a bug (a wrong layer, a wrong position) moves them by far more.
TEST_P(FamilyGolden, Bf16RunsOfTransformersSitInsideTheBf16Tolerances) {
  const std::string f = GetParam();
  // The qwen3_next fixture is chaotic in bfloat16 (measured: transformers' own bf16 run leaves
  // its float32 run by 7% of layer 1's keys and 68% of layer 3's, prompt 1 position 6, with no
  // expert flip below layer 3): no tolerance can hold it that would not also hold a bug. Its
  // float32 goldens (1e-4) are the check; the Qwen3.5 fixture covers the recurrent layers in bf16.
  // The Qwen3.5-MoE fixture likewise: its float32 run is itself 9.6e-4 from float64 (prompt 0's
  // logits), and transformers' bf16 run leaves it by 1.8x the bf16 tolerance on layer 3's keys
  // and 4.4x on its values.
  if (f == "qwen3_next" || f == "qwen3_5_moe_text")
    GTEST_SKIP() << "bf16 run of this fixture is chaotic (see the comment)";
  auto model = Model::load(familyModel(f));
  auto golden = SafetensorsFile::open(familyGolden(f, ".safetensors"));
  const auto meta = familyJson(f);
  const int64_t L = model->config().numLayers;
  // As the audit builds it: the RoPE attention factor (GPT-OSS's YaRN, Phi-3's LongRoPE)
  // scales the scores and their noise.
  const kvscope::detail::Tolerance tol("bfloat16", 1.0, "BF16", L, {}, true,
                                       kvscope::detail::RotaryEmbedding::attentionFactorOf(model->config()));
  int64_t followed = 0;  // near ties the reference took the bf16 run's experts at
  for (size_t i = 0; i < meta["prompts"].size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const std::string p = "p" + std::to_string(i) + ".";
    // A mixture of experts: near-tie router choices flip in bf16 (transformers' Mixtral takes
    // another expert than float32 at 5 (position, layer) pairs, GPT-OSS at 5), and from there
    // the token's keys leave the tolerance by x11 (Mixtral) and x3.6 (GPT-OSS). The reference
    // takes transformers' bf16 experts where its own router cannot tell them apart, as an
    // audit of a trace that records them does (with the slack of such a token's records,
    // nearTieSlack); none may lie beyond the margin.
    ExpertGuide guide;
    if (model->config().moe.numExperts > 0) {
      guide.choices = routingGolden(f, p + "bf16.experts", model->config().numLayers);
      guide.margin = [&tol](int64_t l, int64_t t, double m) { return tol.routerMargin(l, t, m); };
    }
    ReferenceRun run = model->reference(meta["prompts"][i]["ids"].get<std::vector<int64_t>>(), {}, {}, -1,
                                        guide.choices.empty() ? nullptr : &guide);
    for (const auto& d : run.routing) {
      EXPECT_TRUE(d.followed) << "layer " << d.layer << " token " << d.token << ": gap " << d.gap << " beyond margin "
                              << d.margin;
      followed += d.followed ? 1 : 0;
    }
    const FloatTensor want = golden->readFloat(p + "bf16.prompt_logits");
    ASSERT_EQ(want.shape, run.logits.shape);
    const int64_t T = want.dim(0), V = want.dim(1);
    double worst = 0;  // the largest error as a share of its tolerance
    for (int64_t t = 0; t < T; ++t) {
      double err = 0, mag = 0;
      for (int64_t v = 0; v < V; ++v) {
        const auto k = static_cast<size_t>(t * V + v);
        err = std::max(err, static_cast<double>(std::fabs(run.logits.data[k] - want.data[k])));
        mag = std::max(mag, static_cast<double>(std::fabs(run.logits.data[k])));
      }
      worst = std::max(worst, err / (nearTieSlack(run.routing, -1, t) * tol.forLogits(t, mag)));
    }
    EXPECT_LT(worst, 1.0) << "logits";
    for (int64_t l = 0; l < L; ++l) {
      if (model->config().isRecurrentLayer(l)) continue;  // no K/V (its state: the float32 test)
      const std::string layer = p + "bf16.prefill.layer" + std::to_string(l);
      for (const char* kind : {".k", ".v"}) {
        const FloatTensor w = golden->readFloat(layer + kind);
        const FloatTensor got = lastPositions((kind[1] == 'k' ? run.keys : run.values)[static_cast<size_t>(l)], w.dim(1));
        const int64_t h = w.dim(0), c = w.dim(1), d = w.dim(2), first = T - c;
        double share = 0;
        for (int64_t pos = 0; pos < c; ++pos) {
          double err = 0, mag = 0;
          for (int64_t hh = 0; hh < h; ++hh)
            for (int64_t j = 0; j < d; ++j) {
              const auto k = static_cast<size_t>((hh * c + pos) * d + j);
              err = std::max(err, static_cast<double>(std::fabs(got.data[k] - w.data[k])));
              mag = std::max(mag, static_cast<double>(std::fabs(got.data[k])));
            }
          share = std::max(share, err / (nearTieSlack(run.routing, l, first + pos) * tol.forRecord(l, first + pos, mag)));
        }
        EXPECT_LT(share, 1.0) << layer << kind;
      }
    }
  }
  if (f == "mixtral" || f == "gpt_oss" || f == "gpt_oss_mxfp4") {
    EXPECT_GT(followed, 0) << "the bf16 run's flips need the engine's experts";
  }
}

// The float32 reference routes every prompt token to the experts transformers' float32 routers
// chose (the routing goldens, recorded as kvscope-record records them).
TEST_P(FamilyGolden, FloatRoutingTakesTransformersExperts) {
  const std::string f = GetParam();
  auto model = Model::load(familyModel(f));
  if (model->config().moe.numExperts == 0) GTEST_SKIP() << f << " has no mixture of experts";
  const auto meta = familyJson(f);
  const int64_t L = model->config().numLayers;
  for (size_t i = 0; i < meta["prompts"].size(); ++i) {
    const std::string p = "p" + std::to_string(i) + ".";
    const ExpertChoices want = routingGolden(f, p + "f32.experts", L);
    ExpertSink sink;
    const auto ids = meta["prompts"][i]["ids"].get<std::vector<int64_t>>();
    model->referenceWithTaps(ids, sink);
    ASSERT_EQ(sink.byToken.size(), ids.size());
    for (size_t t = 0; t < ids.size(); ++t)
      for (int64_t l = 0; l < L; ++l) {
        if (!model->config().isMoeLayer(l)) continue;
        auto expected = want.of(t, l);
        std::sort(expected.begin(), expected.end());
        EXPECT_EQ(sink.byToken[t][static_cast<size_t>(l)], expected) << "prompt " << i << " token " << t << " layer " << l;
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyGolden,
                         ::testing::Values("qwen3", "qwen3_moe", "olmo2", "granite", "smollm3", "phi3",
                                           "gemma2", "gemma3_text", "gpt_oss", "phi3_longrope", "mixtral",
                                           "olmo3", "glm4", "ministral3", "gemma3", "gpt_oss_mxfp4", "llama4_text", "llama4",
                                           "qwen3_5_text", "qwen3_5", "qwen3_next", "qwen3_5_moe_text",
                                           "deepseek_v3", "deepseek_v2"));

TEST(FamilyConfig, Qwen3ReadsQkNormHeadDimWindowsAndTiedHead) {
  const ModelConfig c = ModelConfig::load(familyModel("qwen3") + "/config.json");
  EXPECT_EQ(c.architecture, Architecture::Qwen3);
  EXPECT_EQ(architectureName(c.architecture), "qwen3");
  EXPECT_TRUE(c.qkNorm);
  EXPECT_EQ(c.headDim, 16);  // explicit, not hidden_size / heads = 12
  EXPECT_NE(c.headDim * c.numHeads, c.hiddenSize);
  EXPECT_FALSE(c.qkvBias);
  EXPECT_FALSE(c.outputProjBias);
  EXPECT_TRUE(c.tieWordEmbeddings);
  EXPECT_EQ(c.slidingWindow, 6);
  EXPECT_EQ(c.slidingLayers, (std::vector<bool>{false, true, true}));
}

TEST(FamilyConfig, Qwen3AttentionBiasCoversTheOutputProjectionToo) {
  // transformers' Qwen3Attention gives q, k, v and o_proj the same attention_bias (unlike
  // Qwen2, whose q/k/v always have biases and o_proj none).
  nlohmann::json doc = {{"model_type", "qwen3"},         {"vocab_size", 64},
                        {"hidden_size", 16},              {"num_attention_heads", 2},
                        {"num_hidden_layers", 1},         {"intermediate_size", 32},
                        {"max_position_embeddings", 32}, {"attention_bias", true}};
  const ModelConfig biased = ModelConfig::fromJson(doc, "config.json");
  EXPECT_TRUE(biased.qkvBias);
  EXPECT_TRUE(biased.outputProjBias);
  doc["attention_bias"] = false;
  const ModelConfig plain = ModelConfig::fromJson(doc, "config.json");
  EXPECT_FALSE(plain.qkvBias);
  EXPECT_FALSE(plain.outputProjBias);
  EXPECT_TRUE(plain.slidingLayers == std::vector<bool>{false});  // use_sliding_window off
}

TEST(FamilyWriter, Qwen3CheckpointHasItsQkNormsAndTheEngineMatchesTheReference) {
  // What `make-demo --arch qwen3` writes: q/k norm weights per layer, an explicit head_dim
  // (16, not 32 / 4), windows from max_window_layers on; loads as qwen3 and the cached
  // engine's greedy steps reproduce the uncached reference.
  CheckpointSpec spec = test::smallSpec(parseArchitecture("qwen3"));
  spec.headDim = 16;
  spec.slidingWindow = 4;
  spec.useSlidingWindow = true;
  spec.maxWindowLayers = 1;
  const std::string dir = test::writeScratchCheckpoint("family-writer", "qwen3", spec);
  auto model = Model::load(dir);
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.architecture, Architecture::Qwen3);
  EXPECT_TRUE(c.qkNorm);
  EXPECT_EQ(c.headDim, 16);
  EXPECT_EQ(c.slidingLayers, (std::vector<bool>{false, true}));
  EXPECT_TRUE(model->checkpoint().contains("model.layers.1.self_attn.k_norm.weight"));
  RequestSpec r;
  r.promptIds = {5, 17, 42, 99, 7, 3, 250, 11};
  r.maxNewTokens = 6;
  r.stopAtEos = false;
  Trace trace = Engine(model).run({r}, {});
  std::vector<int64_t> ids = r.promptIds;
  for (int64_t t : trace.requests[0].generated) ids.push_back(t);
  const ReferenceRun ref = model->reference(ids);
  const auto steps = trace.stepsOf(0);
  ASSERT_EQ(steps.size(), 6u);
  for (size_t s = 0; s < steps.size(); ++s)
    EXPECT_TRUE(closeTo(stepRow(steps[s]->logits),
                        goldenRow(ref.logits, static_cast<int64_t>(r.promptIds.size() - 1 + s)), 1e-4f))
        << "step " << s;
}

}  // namespace
