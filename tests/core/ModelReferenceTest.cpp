// Stage 1 against transformers: prompt logits, hidden states, prefill K/V and
// teacher-forced logits of the gpt2 and llama fixtures, max abs difference <= 1e-4.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "TestSupport.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/Model.hpp"

using namespace kvscope;
using kvscope::test::closeTo;

namespace {
struct GoldenCase {
  std::string model;
  int prompt;
};
std::string caseName(const ::testing::TestParamInfo<GoldenCase>& i) {
  return i.param.model + "_p" + std::to_string(i.param.prompt);
}
std::vector<int64_t> idsOf(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

class ModelGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(ModelGolden, PromptLogitsHiddenStatesAndPrefillKvMatchTransformers) {
  const auto& c = GetParam();
  auto model = Model::load(test::hfModel(c.model));
  auto golden = SafetensorsFile::open(test::fixture("hf/golden/" + c.model + ".safetensors"));
  auto meta = test::goldenJson(c.model)["prompts"][static_cast<size_t>(c.prompt)];
  auto ids = idsOf(meta["ids"]);
  const std::string p = "p" + std::to_string(c.prompt) + ".";
  ReferenceRun run = model->reference(ids);
  EXPECT_TRUE(closeTo(run.logits, golden->readFloat(p + "prompt_logits"), 1e-4f));
  ASSERT_EQ(run.hiddenStates.size(), static_cast<size_t>(model->config().numLayers + 1));
  for (size_t j = 0; j < run.hiddenStates.size(); ++j)
    EXPECT_TRUE(closeTo(run.hiddenStates[j], golden->readFloat(p + "hidden." + std::to_string(j)), 1e-4f))
        << "hidden_states[" << j << "]";
  for (int64_t l = 0; l < model->config().numLayers; ++l) {
    const std::string layer = p + "prefill.layer" + std::to_string(l);
    EXPECT_TRUE(closeTo(run.keys[static_cast<size_t>(l)], golden->readFloat(layer + ".k"), 1e-4f)) << layer;
    EXPECT_TRUE(closeTo(run.values[static_cast<size_t>(l)], golden->readFloat(layer + ".v"), 1e-4f)) << layer;
  }
}

TEST_P(ModelGolden, TeacherForcedLogitsMatchTransformers) {
  const auto& c = GetParam();
  auto model = Model::load(test::hfModel(c.model));
  auto golden = SafetensorsFile::open(test::fixture("hf/golden/" + c.model + ".safetensors"));
  const std::string key = "p" + std::to_string(c.prompt) + ".teacher_forced_logits";
  if (!golden->contains(key)) GTEST_SKIP() << "fixture has no " << key;
  auto meta = test::goldenJson(c.model)["prompts"][static_cast<size_t>(c.prompt)];
  auto ids = idsOf(meta["ids"]);
  for (int64_t t : idsOf(meta["greedy_manual"])) ids.push_back(t);
  // The teacher-forced pass covers prompt + continuation (the last generated token is fed
  // too in the fixture when its row count says so).
  auto want = golden->readFloat(key);
  ids.resize(static_cast<size_t>(want.shape[0]));
  EXPECT_TRUE(closeTo(model->reference(ids).logits, want, 1e-4f));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelGolden,
                         ::testing::Values(GoldenCase{"gpt2", 0}, GoldenCase{"gpt2", 1},
                                           GoldenCase{"gpt2", 2}, GoldenCase{"llama", 0},
                                           GoldenCase{"llama", 1}, GoldenCase{"llama", 2}),
                         caseName);

TEST(ModelReference, RejectsIdsOutsideTheEmbedding) {
  auto model = Model::load(test::hfModel("gpt2"));
  EXPECT_THROW(model->reference({1, 2, 5000}), UsageError);
}

TEST(ModelReference, RejectsPromptLongerThanContextBeforeReadingPositions) {
  auto model = Model::load(test::hfModel("gpt2"));  // n_positions 64
  std::vector<int64_t> ids(65, 3);
  try {
    model->reference(ids);
    FAIL() << "expected ContextLimitError";
  } catch (const ContextLimitError& e) {
    EXPECT_EQ(e.position(), 64);
    EXPECT_EQ(e.limit(), 64);
  }
}

TEST(ModelReference, KeepsTheLogitsRowsAskedForAndSkipsHiddenStates) {
  auto model = Model::load(test::hfModel("llama"));
  const std::vector<int64_t> ids{0, 5, 9, 12, 3, 7, 7, 1};
  const ReferenceRun all = model->reference(ids);
  ReferenceKeep keep;
  keep.logitsFrom = 5;
  keep.hiddenStates = false;
  const ReferenceRun some = model->reference(ids, {}, {}, -1, nullptr, {}, keep);
  EXPECT_EQ(some.logitsFrom, 5);
  ASSERT_EQ(some.logits.shape, (std::vector<int64_t>{3, all.logits.shape[1]}));
  EXPECT_TRUE(closeTo(some.logits, test::rows(all.logits, 5, 3), 1e-5f));
  EXPECT_TRUE(some.hiddenStates.empty());
  ASSERT_EQ(some.keys.size(), all.keys.size());  // the records are all there
  for (size_t l = 0; l < all.keys.size(); ++l) EXPECT_TRUE(closeTo(some.keys[l], all.keys[l], 0.0f));
  // Past the end: the last row (a pass always gives the row that chooses the next token).
  keep.logitsFrom = 100;
  const ReferenceRun last = model->reference(ids, {}, {}, -1, nullptr, {}, keep);
  EXPECT_EQ(last.logitsFrom, 7);
  EXPECT_TRUE(closeTo(last.logits, test::rows(all.logits, 7, 1), 1e-5f));
  // The memory estimate counts the rows kept, not the stream's.
  const int64_t T = 8192;
  keep.logitsFrom = T - 64;
  const uint64_t rowBytes = static_cast<uint64_t>(model->config().vocabSize) * sizeof(float);
  EXPECT_EQ(model->referenceMemory(T).kept - model->referenceMemory(T, keep).kept,
            (T - 64) * rowBytes + static_cast<uint64_t>((model->config().numLayers + 2) * T * model->config().hiddenSize) * sizeof(float));
}

TEST(ModelReference, WeightUpdateChangesLogitsAndBumpsVersion) {
  auto model = Model::load(test::hfModel("llama"));
  auto before = model->reference({0, 5, 9}).logits;
  model->applyWeightUpdate("model.layers.1.self_attn.k_proj.weight", 0.5f, 7);
  EXPECT_EQ(model->weightsVersion(), 1u);
  auto after = model->reference({0, 5, 9}).logits;
  EXPECT_GT(FloatTensor::maxAbsDiff(before, after), 1e-3f);
  auto reloaded = Model::load(test::hfModel("llama"));  // the file is untouched
  EXPECT_EQ(reloaded->reference({0, 5, 9}).logits, before);
}

}  // namespace
