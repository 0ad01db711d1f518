// mlx-lm prompt caches as traces (tests/fixtures/mlx, saved by mlx-lm itself with
// save_prompt_cache: make_mlx_fixtures.py): KVCache and unwrapped RotatingKVCache layers, and
// DeepSeek's latent or decompressed-head caches and Qwen3-Next's Gated DeltaNet states, audit
// clean against the checkpoint that made them, with the tokens from the file's metadata or
// given by the caller; a wrapped ring, a cache without tokens, another model and a damaged
// file are refused naming the file and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <utility>

#include "TestSupport.hpp"
#include "kvscope/Auditor.hpp"
#include "kvscope/Error.hpp"
#include "kvscope/MlxPromptCacheTrace.hpp"
#include "kvscope/Model.hpp"
#include "kvscope/TraceFileSniffer.hpp"
#include "trace/MlxPromptCache.hpp"

using namespace kvscope;

namespace {

std::string mlxFixture(const std::string& name) { return test::fixture("mlx/" + name); }

std::string fieldOf(const std::function<void()>& read) {
  try {
    read();
  } catch (const InputError& e) {
    return e.field();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(MlxPromptCache, SavedCachesAuditCleanAgainstTheirCheckpoint) {
  auto model = Model::load(test::hfModel("llama"));
  for (const char* name : {"llama-kv.safetensors", "llama-rotating.safetensors"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(describeFile(mlxFixture(name)).kind, FileKind::MlxCache);
    const Trace t = readMlxPromptCacheTrace(mlxFixture(name), model->checkpoint());
    ASSERT_EQ(t.steps.size(), 1u);
    EXPECT_EQ(t.steps[0].fedIds.size(), 13u);
    EXPECT_EQ(t.steps[0].layers[0].keys.shape, (std::vector<int64_t>{2, 13, 16}));
    const auto r = Auditor::audit(*model, t);
    EXPECT_TRUE(r.report.clean()) << r.report.toText();
    EXPECT_EQ(r.report.stage(AuditStage::Cache)->status, StageStatus::Pass);
  }
}

// DeepSeek: mlx-lm's V3 caches latent rows and roped key parts (the pairs turned in place, read
// back in V3's de-interleaved order), its V2 each head's decompressed key and value.
TEST(MlxPromptCache, DeepseekCachesAuditCleanAsLatentRowsOrDecompressedHeads) {
  for (const auto& [family, heads] : {std::pair<std::string, bool>{"deepseek_v3", false}, {"deepseek_v2", true}}) {
    SCOPED_TRACE(family);
    auto model = Model::load(test::fixture("families/models/" + family));
    const Trace t = readMlxPromptCacheTrace(mlxFixture(family + (heads ? "-heads" : "-latent") + ".safetensors"),
                                            model->checkpoint());
    EXPECT_EQ(t.model.latentHeads, heads);
    ASSERT_EQ(t.layerKinds.size(), 3u);
    for (const auto& k : t.layerKinds) EXPECT_TRUE(k.latent);
    const auto& first = t.steps[0].layers[0];
    EXPECT_EQ(first.keys.shape, heads ? (std::vector<int64_t>{4, 13, 24}) : (std::vector<int64_t>{1, 13, 32}));
    EXPECT_EQ(first.values.shape, heads ? (std::vector<int64_t>{4, 13, 12}) : (std::vector<int64_t>{1, 13, 8}));
    const auto r = Auditor::audit(*model, t);
    EXPECT_TRUE(r.report.clean()) << r.report.toText();
  }
}

// Qwen3-Next: mlx-lm's ArraysCache of each Gated DeltaNet layer (the conv's last K-1 inputs
// time-major, the state as [Hv, Dv, Dk]) read as a recurrent layer's states [C, K-1] and
// [Hv, Dk, Dv]: held against the reference's after the same tokens, clean; a state that is not
// the reference's is found at its layer, and states of another shape fail stage 1 by name.
TEST(MlxPromptCache, GatedDeltaNetStatesAreReadTurnedAndHeldAgainstTheReference) {
  auto model = Model::load(test::fixture("families/models/qwen3_next"));
  const Trace t = readMlxPromptCacheTrace(mlxFixture("qwen3_next-states.safetensors"), model->checkpoint());
  ASSERT_EQ(t.layerKinds.size(), 4u);
  for (int64_t l = 0; l < 4; ++l) EXPECT_EQ(t.layerKind(l).recurrent, l % 2 == 0) << l;
  const auto& step = t.steps.at(0);
  EXPECT_EQ(step.fedIds.size(), 13u);
  EXPECT_EQ(step.layers[0].convState.shape, (std::vector<int64_t>{64, 3}));  // C = 2 x 2 x 8 + 4 x 8, K - 1
  EXPECT_EQ(step.layers[0].recurrentState.shape, (std::vector<int64_t>{4, 8, 8}));
  EXPECT_TRUE(step.layers[0].keys.empty());
  EXPECT_EQ(step.layers[1].keys.shape, (std::vector<int64_t>{2, 13, 16}));
  const auto r = Auditor::audit(*model, t);
  EXPECT_TRUE(r.report.clean()) << r.report.toText();
  ASSERT_EQ(r.report.steps.size(), 1u);
  ASSERT_EQ(r.report.steps[0].stateError.size(), 4u);
  for (const int l : {0, 2}) {  // compared, and within the tolerance
    EXPECT_LT(r.report.steps[0].stateError[static_cast<size_t>(l)], r.report.steps[0].stateTolerance[static_cast<size_t>(l)]);
    EXPECT_GT(r.report.steps[0].stateTolerance[static_cast<size_t>(l)], 0.0);
  }
  // Layer 2's state as mlx-lm keeps it ([Hv, Dv, Dk]) not turned: recurrent_state at layer 2.
  Trace unturned = t;
  auto& state = unturned.steps[0].layers[2].recurrentState;
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t k = 0; k < 8; ++k)
      for (int64_t v = 0; v < k; ++v)
        std::swap(state.data[static_cast<size_t>((h * 8 + k) * 8 + v)], state.data[static_cast<size_t>((h * 8 + v) * 8 + k)]);
  const auto bad = Auditor::audit(*model, unturned).report;
  ASSERT_FALSE(bad.findings.empty()) << bad.toText();
  EXPECT_EQ(bad.findings[0].id, "recurrent_state") << bad.toText();
  EXPECT_EQ(bad.findings[0].layer, 2) << bad.toText();
  // Two conv inputs: neither the K = 4 transformers keeps nor mlx-lm's K - 1.
  Trace narrow = t;
  auto& conv = narrow.steps[0].layers[0].convState;
  conv = FloatTensor::zeros({64, 2});
  const auto misfit = Auditor::audit(*model, narrow).report;
  EXPECT_EQ(misfit.stage(AuditStage::Reference)->status, StageStatus::Fail) << misfit.toText();
  EXPECT_NE(misfit.toText().find("layer0.conv_state rows are [64, 2]"), std::string::npos) << misfit.toText();
  // A Gated DeltaNet layer's cache where the checkpoint has attention, and the reverse.
  ModelConfig swapped = model->config();
  swapped.deltaNet.layers = {false, true, true, false};
  const std::string path = mlxFixture("qwen3_next-states.safetensors");
  EXPECT_EQ(fieldOf([&] { kvscope::detail::mlxPromptCacheTrace(path, swapped, {}); }), "1.0");
  swapped.deltaNet.layers = {true, true, true, false};
  EXPECT_EQ(fieldOf([&] { kvscope::detail::mlxPromptCacheTrace(path, swapped, {}); }), "1.1");
  // States of another model: 48 conv channels (key head dim 4), then 64 channels with a state of
  // [1, 2, 16, 8] (value heads 2 x 16) against the file's [1, 4, 8, 8].
  swapped = model->config();
  swapped.deltaNet.keyHeadDim = 4;  // also 48 conv channels, not 64: the conv is named first
  EXPECT_EQ(fieldOf([&] { kvscope::detail::mlxPromptCacheTrace(path, swapped, {}); }), "0.0.0");
  swapped = model->config();
  swapped.deltaNet.valueHeads = 2;
  swapped.deltaNet.valueHeadDim = 16;  // the same 64 channels, a state of [2, 16, 8]
  EXPECT_EQ(fieldOf([&] { kvscope::detail::mlxPromptCacheTrace(path, swapped, {}); }), "0.0.1");
}

TEST(MlxPromptCache, TokensComeFromTheCallerWhenTheFileNamesNone) {
  auto model = Model::load(test::hfModel("llama"));
  const std::string plain = mlxFixture("llama-kv-plain.safetensors");
  EXPECT_EQ(fieldOf([&] { readMlxPromptCacheTrace(plain, model->checkpoint()); }), "0.tokens");
  const Trace named = readMlxPromptCacheTrace(mlxFixture("llama-kv.safetensors"), model->checkpoint());
  const auto tokens = named.requests[0].promptIds;
  EXPECT_TRUE(Auditor::audit(*model, readMlxPromptCacheTrace(plain, model->checkpoint(), tokens)).report.clean());
  // Other tokens than the cache was made from: the first one that differs is where it diverges.
  auto other = tokens;
  other[4] = other[4] + 1;
  const auto r = Auditor::audit(*model, readMlxPromptCacheTrace(plain, model->checkpoint(), other)).report;
  ASSERT_FALSE(r.clean());
  EXPECT_EQ(r.firstDivergence.position, 4) << r.toText();
  auto shorter = tokens;
  shorter.pop_back();
  EXPECT_EQ(fieldOf([&] { readMlxPromptCacheTrace(plain, model->checkpoint(), shorter); }), "0.tokens");
  // A file that names its tokens takes no others.
  EXPECT_EQ(fieldOf([&] { readMlxPromptCacheTrace(mlxFixture("llama-kv.safetensors"), model->checkpoint(), other); }),
            "0.tokens");
  EXPECT_TRUE(readMlxPromptCacheTrace(mlxFixture("llama-kv.safetensors"), model->checkpoint(), tokens).steps.size() == 1);
}

TEST(MlxPromptCache, WrappedRingsOtherModelsAndDamageAreRefusedByField) {
  auto model = Model::load(test::hfModel("llama"));
  EXPECT_EQ(fieldOf([&] { readMlxPromptCacheTrace(mlxFixture("llama-wrapped.safetensors"), model->checkpoint()); }),
            "0.5");
  auto gpt2 = Model::load(test::hfModel("gpt2"));  // 2 layers of 12 heads
  EXPECT_NE(fieldOf([&] { readMlxPromptCacheTrace(mlxFixture("llama-kv.safetensors"), gpt2->checkpoint()); }), "");
  std::ifstream in(mlxFixture("llama-rotating.safetensors"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto at = bytes.find("\"RotatingKVCache\"");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 17, "\"QuantizedKVCach\"");  // same length: the header stays valid
  const auto path = std::filesystem::temp_directory_path() / "kvscope-mlx-quantized.safetensors";
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_EQ(fieldOf([&] { readMlxPromptCacheTrace(path.string(), model->checkpoint()); }), "1.0");
  std::filesystem::remove(path);
}

}  // namespace
