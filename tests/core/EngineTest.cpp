// The cached engine against transformers: greedy continuations, every step's logits, and
// the left-padded batch fixture.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "TestSupport.hpp"
#include "kvscope/Engine.hpp"
#include "kvscope/Error.hpp"

using namespace kvscope;
using kvscope::test::closeTo;

namespace {
FloatTensor row(const FloatTensor& t, int64_t r) { return test::rows(t, r, 1); }
FloatTensor asRow(const FloatTensor& v) { return FloatTensor({1, v.numel()}, v.data); }
}  // namespace

class EngineGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineGolden, CachedGreedyDecodingReproducesTransformers) {
  const std::string name = GetParam();
  auto model = Model::load(test::hfModel(name));
  auto golden = SafetensorsFile::open(test::fixture("hf/golden/" + name + ".safetensors"));
  auto meta = test::goldenJson(name);
  std::vector<RequestSpec> specs;
  for (const auto& p : meta["prompts"]) {
    RequestSpec s;
    s.promptIds = p["ids"].get<std::vector<int64_t>>();
    s.maxNewTokens = 16;
    s.stopAtEos = false;  // the fixture decodes 16 tokens regardless of EOS
    specs.push_back(s);
  }
  Engine engine(model);
  Trace trace = engine.run(specs, {});
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& p = meta["prompts"][i];
    EXPECT_EQ(trace.requests[i].generated, p["greedy_manual"].get<std::vector<int64_t>>()) << "prompt " << i;
    auto want = golden->readFloat("p" + std::to_string(i) + ".greedy.step_logits");
    auto steps = trace.stepsOf(static_cast<int64_t>(i));
    ASSERT_EQ(steps.size(), 16u);
    for (size_t s = 0; s < steps.size(); ++s)
      EXPECT_TRUE(closeTo(asRow(steps[s]->logits), row(want, static_cast<int64_t>(s)), 1e-4f))
          << "prompt " << i << " step " << s;
    // The cache after the last fed token equals transformers' final cache.
    const std::string key = "p" + std::to_string(i) + ".final.layer0.k";
    ASSERT_TRUE(golden->contains(key));
    int64_t len = 0;
    for (const auto* st : steps) len = st->layers[0].cacheLength;
    EXPECT_EQ(len, golden->entry(key).shape[1]);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineGolden, ::testing::Values("gpt2", "llama"));

TEST(Engine, LeftPaddedBatchMatchesTransformersBatchFixture) {
  auto model = Model::load(test::hfModel("llama"));
  auto golden = SafetensorsFile::open(test::fixture("hf/golden/llama.safetensors"));
  auto meta = test::goldenJson("llama")["batch"];
  auto inputIds = golden->readInt64("batch.input_ids");
  auto mask = golden->readInt64("batch.attention_mask");
  const int64_t width = golden->entry("batch.input_ids").shape[1];
  std::vector<RequestSpec> specs;
  for (int64_t b = 0; b < 2; ++b) {
    RequestSpec s;
    for (int64_t j = 0; j < width; ++j)
      if (mask[static_cast<size_t>(b * width + j)]) s.promptIds.push_back(inputIds[static_cast<size_t>(b * width + j)]);
    s.maxNewTokens = 8;
    s.stopAtEos = false;
    s.batchGroup = 0;
    specs.push_back(s);
  }
  Trace trace = Engine(model).run(specs, {});
  auto logits = golden->readFloat("batch.logits");  // [steps, B, V]
  const int64_t V = logits.shape[2];
  for (int64_t b = 0; b < 2; ++b) {
    EXPECT_EQ(trace.requests[static_cast<size_t>(b)].generated, meta["generated"][static_cast<size_t>(b)].get<std::vector<int64_t>>());
    auto steps = trace.stepsOf(b);
    ASSERT_EQ(steps.size(), 8u);
    for (int64_t s = 0; s < 8; ++s) {
      FloatTensor want({1, V}, std::vector<float>(logits.data.begin() + (s * 2 + b) * V,
                                                  logits.data.begin() + (s * 2 + b + 1) * V));
      EXPECT_TRUE(closeTo(asRow(steps[static_cast<size_t>(s)]->logits), want, 1e-4f)) << "row " << b << " step " << s;
    }
  }
  // The shorter prompt was left-padded: its prefill positions follow cumsum(mask) - 1.
  const auto* prefill = trace.stepsOf(1)[0];
  ASSERT_FALSE(prefill->fedMask.empty());
  int64_t expected = 0;
  for (size_t j = 0; j < prefill->positions.size(); ++j) {
    if (prefill->fedMask[j]) {
      EXPECT_EQ(prefill->positions[j], expected++);
    }
  }
}

TEST(Engine, CacheIsPreallocatedAndGrowsByOnePerDecodeStep) {
  auto model = Model::load(test::hfModel("gpt2"));
  RequestSpec s;
  s.promptIds = {5, 6, 7};
  s.maxNewTokens = 5;
  s.stopAtEos = false;
  Trace trace = Engine(model).run({s}, {});
  auto steps = trace.stepsOf(0);
  ASSERT_EQ(steps.size(), 5u);
  for (size_t i = 0; i < steps.size(); ++i) {
    for (const auto& l : steps[i]->layers) {
      EXPECT_EQ(l.cacheLength, 3 + static_cast<int64_t>(i));
      EXPECT_EQ(l.keys.shape, (std::vector<int64_t>{4, i == 0 ? 3 : 1, 16}));
      EXPECT_TRUE(l.keyChecksum.has_value());
    }
    EXPECT_EQ(steps[i]->positions.back(), 2 + static_cast<int64_t>(i));
  }
}

TEST(Engine, StopsAtContextLimitBeforeReadingAPositionRow) {
  auto model = Model::load(test::hfModel("gpt2"));  // n_positions 64
  RequestSpec s;
  s.promptIds.assign(60, 7);
  s.maxNewTokens = 20;
  s.stopAtEos = false;
  Trace trace = Engine(model).run({s}, {});
  EXPECT_EQ(trace.requests[0].stopReason, "context_limit");
  // Positions 60..63 exist: the prefill token plus 4 fed tokens -> 5 generated tokens.
  EXPECT_EQ(trace.requests[0].generated.size(), 5u);
  for (const auto& st : trace.steps)
    for (int64_t p : st.positions) EXPECT_LT(p, 64);
}

TEST(Engine, RejectsPromptBeyondContext) {
  auto model = Model::load(test::hfModel("gpt2"));
  RequestSpec s;
  s.promptIds.assign(65, 7);
  EXPECT_THROW(Engine(model).run({s}, {}), ContextLimitError);
}

TEST(Engine, StopsAtEos) {
  auto model = Model::load(test::hfModel("llama"));
  // Find a prompt whose greedy continuation hits EOS (id 1) by forcing it: prompt ends in
  // tokens, and the engine must stop as soon as the EOS id is chosen.
  RequestSpec s;
  s.promptIds = {0, 34, 86};
  s.maxNewTokens = 40;
  Trace trace = Engine(model).run({s}, {});
  const auto& r = trace.requests[0];
  if (r.stopReason == "eos") {
    EXPECT_EQ(r.generated.back(), 1);
  } else {
    EXPECT_EQ(r.stopReason, "max_new_tokens");
    EXPECT_EQ(r.generated.size(), 40u);
    EXPECT_EQ(std::count(r.generated.begin(), r.generated.end(), 1), 0);
  }
}

TEST(Engine, UncachedModeMatchesCachedLogits) {
  auto model = Model::load(test::hfModel("llama"));
  RequestSpec s;
  s.promptIds = {0, 34, 86, 69, 301};
  s.maxNewTokens = 6;
  s.stopAtEos = false;
  Trace cached = Engine(model).run({s}, {});
  EngineOptions o;
  o.uncached = true;
  Trace uncached = Engine(model).run({s}, o);
  EXPECT_EQ(uncached.mode, "uncached");
  EXPECT_EQ(cached.requests[0].generated, uncached.requests[0].generated);
  for (size_t i = 0; i < cached.steps.size(); ++i) {
    EXPECT_TRUE(closeTo(asRow(cached.steps[i].logits), asRow(uncached.steps[i].logits), 1e-4f));
    for (size_t l = 0; l < cached.steps[i].layers.size(); ++l)
      EXPECT_TRUE(closeTo(FloatTensor({cached.steps[i].layers[l].keys.numel()}, cached.steps[i].layers[l].keys.data),
                          FloatTensor({uncached.steps[i].layers[l].keys.numel()}, uncached.steps[i].layers[l].keys.data), 1e-4f));
  }
}

// A weight update rebuilds each batched request's cache alone (without pads); the requests
// then decode alone instead of rejoining a batch whose cache lengths no longer line up.
TEST(Engine, BatchedRequestsSurviveAWeightUpdate) {
  auto model = Model::load(test::hfModel("llama"));
  RequestSpec a, b;
  a.promptIds = {0, 34, 86, 69, 301, 291, 938};
  b.promptIds = {0, 316, 284};
  for (RequestSpec* s : {&a, &b}) {
    s->maxNewTokens = 5;
    s->stopAtEos = false;
  }
  EngineOptions o;
  o.weightUpdates.push_back({2, "model.norm.weight", 0.1f, 0});
  std::vector<std::vector<int64_t>> solo;
  for (const RequestSpec& s : {a, b})
    solo.push_back(Engine(Model::load(test::hfModel("llama"))).run({s}, o).requests[0].generated);
  a.batchGroup = b.batchGroup = 0;
  const Trace batched = Engine(model).run({a, b}, o);
  ASSERT_EQ(batched.requests.size(), 2u);
  EXPECT_EQ(batched.requests[0].generated, solo[0]);
  EXPECT_EQ(batched.requests[1].generated, solo[1]);
}
